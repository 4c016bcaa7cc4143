"""transformers' own common testers (``ModelTesterMixin``, ``ConfigTester``, from transformers' source release; see
``tests/upstream.py``) on every family, written the way transformers' model test files write them: a model tester
that makes a tiny config and inputs, and a ``unittest.TestCase`` per family variant.

What a family does differently from what the tester assumes is said here, as transformers' own model test files say
it (an attribute of the model tester, an override of ``_prepare_for_class``); a test the tester itself skips says why
in its own message.
"""

import copy
import functools
import inspect
import tempfile
import unittest
from unittest import mock

import torch
from transformers import ElectraConfig
from transformers.models.auto import modeling_auto

from hf_plm_ext import (ElectraForRTDPreTraining, KAdapterModel, RevLSHForCausalLM, RevLSHModel,
                        TransfoXLLMHeadModel)
from hf_plm_ext.modeling.transfo_xl.modeling_transfo_xl import AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax
from hf_plm_ext.registry import auto_class

from family_common import TINY_CONFIGS, VOCAB, model_classes
from upstream import load

modeling_common = load("transformers", "test_modeling_common")
configuration_common = load("transformers", "test_configuration_common")
generation = load("transformers", "generation.test_utils")

# the tester's speed rule is two layers at most; and its attention checks take one shape per stack, so each rev-lsh
# row holds one layer kind (the three kinds, mixed, are covered by test_family_common.py)
TWO_LAYERS = {
    "rev-lsh": dict(attn_layers=["lsh", "lsh"]),
    "rev-lsh-plain": dict(attn_layers=["local", "local"]),
    "rev-lsh-rotary": dict(attn_layers=["full", "full"]),
    "k-adapter": dict(num_hidden_layers=2, adapter_layers=[0, 2]),
}


# transformers' own tables of model types per kind of head (the names behind its Auto classes)
TRANSFORMERS_TABLES = {id(table) for name, table in vars(modeling_auto).items() if name.endswith("_MAPPING_NAMES")}


def auto_table_entries(variant) -> list:
    """``[(the table behind an Auto class, {model type: class name})]`` for a family's classes registered with
    transformers' Auto classes."""
    model_type = TINY_CONFIGS[variant]().model_type
    entries = []
    for auto_name, model_class in model_classes(TINY_CONFIGS[variant]).items():
        table = auto_class(auto_name)._model_mapping._model_mapping
        if id(table) in TRANSFORMERS_TABLES:
            entries.append((table, {model_type: model_class.__name__}))
    return entries


class FamilyModelTester:
    """transformers' ``XModelTester`` for one row of ``TINY_CONFIGS``."""

    def __init__(self, parent, variant, batch_size=3, seq_length=7):
        self.parent = parent
        self.variant = variant
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = True
        self.vocab_size = VOCAB
        config = self.get_config()
        text = config.get_text_config()
        self.hidden_size = TINY_CONFIGS[variant].hidden_state_width(config)
        self.num_hidden_layers = text.num_hidden_layers
        self.num_attention_heads = text.num_attention_heads
        base_model = model_classes(TINY_CONFIGS[variant])["AutoModel"]
        self.takes_token_types = "token_type_ids" in inspect.signature(base_model.forward).parameters
        if variant.startswith("rev-lsh"):
            # as transformers' Reformer tester: a chunked layer's attentions are [batch, heads, chunks (x rounds for
            # LSH), chunk, keys (its chunk and the one before)]
            kind = text.attn_layers[0]
            if kind != "full":
                self.chunk_length = getattr(text, f"{kind}_attn_chunk_length")
                self.seq_length = 4 * self.chunk_length
                self.encoder_seq_length = self.seq_length // self.chunk_length
                self.key_length = 2 * self.chunk_length
            if kind == "lsh":
                self.num_hashes = text.num_hashes

    def get_config(self):
        return TINY_CONFIGS[self.variant](**TWO_LAYERS.get(self.variant, {}))

    def prepare_config_and_inputs_for_common(self):
        generator = torch.Generator().manual_seed(0)
        shape = (self.batch_size, self.seq_length)
        inputs = {"input_ids": torch.randint(5, VOCAB, shape, generator=generator),
                  "attention_mask": torch.ones(shape, dtype=torch.long)}
        inputs["attention_mask"][0, -2:] = 0
        if self.takes_token_types:
            inputs["token_type_ids"] = torch.zeros(shape, dtype=torch.long)
        return self.get_config(), inputs


class FamilyCommonTests(modeling_common.ModelTesterMixin):
    """transformers' ``ModelTesterMixin`` on one row of ``TINY_CONFIGS`` (``variant``), every class registered."""

    variant = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.variant is None:  # a family's shared overrides
            return
        cls.all_model_classes = tuple(dict.fromkeys(model_classes(TINY_CONFIGS[cls.variant]).values()))
        cls.all_generative_model_classes = tuple(c for c in cls.all_model_classes if c.can_generate())

    def setUp(self):
        # transformers finds a model's kind of head in its own tables of model types (the Auto classes' names);
        # a family registered with the Auto classes is entered there for the test, as a transformers model is
        for table, entry in auto_table_entries(self.variant):
            patch = mock.patch.dict(table, entry)
            patch.start()
            self.addCleanup(patch.stop)
        self.model_tester = FamilyModelTester(self, self.variant)
        config = self.model_tester.get_config()
        # the tester's config fields: the row's own, sub-configs left at their defaults (as transformers' test files
        # give a composite config's ConfigTester only its top-level fields)
        fields = {k: v for k, v in config.to_diff_dict().items() if k not in type(config).sub_configs}
        self.config_tester = configuration_common.ConfigTester(self, config_class=type(config), **fields)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        """transformers' labels for the heads in its tables (entered in setUp); the heads it has none for, as
        transformers' BERT tests give its pre-training head."""
        inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels:
            batch, length = self.model_tester.batch_size, self.model_tester.seq_length
            if model_class.__name__ == "MacBertForPreTraining":
                inputs["labels"] = torch.zeros((batch, length), dtype=torch.long)
                inputs["sentence_order_label"] = torch.zeros(batch, dtype=torch.long)
            elif model_class.__name__ == "MacBertForSpellingCorrection":
                inputs["labels"] = inputs["input_ids"].clone()
        return inputs

    def test_config(self):
        self.config_tester.run_common_tests()


def seeded(method, seed):
    @functools.wraps(method)
    def with_seed(*args, **kwargs):
        torch.manual_seed(seed)
        return method(*args, **kwargs)

    return with_seed


class TestElectraRtdCommon(FamilyCommonTests, unittest.TestCase):
    variant = "electra-rtd"

    def setUp(self):
        super().setUp()
        # The pre-training model masks its input and samples the generator's replacements from torch's global RNG
        # on every forward (ELECTRA's objective); each draw is seeded here, as transformers' ViTMAE tests fix its
        # random masking, so that two forwards of one input draw alike.
        for name, seed in (("mask_tokens", 0), ("sample_replacements", 1)):
            draw = getattr(ElectraForRTDPreTraining, name)
            patch = mock.patch.object(ElectraForRTDPreTraining, name, seeded(draw, seed))
            patch.start()
            self.addCleanup(patch.stop)

    def test_config(self):
        """All of ConfigTester's checks but the composite one, which assumes each sub-config of its own class: the
        two halves are both ``ElectraConfig``. What a stock ``ElectraConfig.from_pretrained`` of the folder gives
        (the discriminator, the half one fine-tunes) is checked instead."""
        with mock.patch.object(self.config_tester, "create_and_test_config_from_and_save_pretrained_composite"):
            self.config_tester.run_common_tests()
        config = self.model_tester.get_config()
        with tempfile.TemporaryDirectory() as folder:
            config.save_pretrained(folder)
            loaded = ElectraConfig.from_pretrained(folder)
        expected = config.discriminator_config.to_dict()
        self.assertEqual({k: v for k, v in loaded.to_dict().items() if k != "transformers_version"},
                         {k: v for k, v in expected.items() if k != "transformers_version"})


# a family that generates inherits the generation tester, and only such a family (the tester checks both ways)
class TestTransfoXlCommon(FamilyCommonTests, generation.GenerationTesterMixin, unittest.TestCase):
    variant = "transfo-xl"

    def test_model_get_set_embeddings(self):
        """Transformer-XL's input embedding is an adaptive embedding (a table per frequency cluster, projected), and
        its output layer an adaptive softmax, by the paper's design, not ``nn.Embedding`` / ``nn.Linear``: get and set
        take those modules, and setting one is what the model then embeds with."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            model = model_class(config).eval()
            embedding = model.get_input_embeddings()
            self.assertIsInstance(embedding, AdaptiveEmbedding)
            replacement = copy.deepcopy(embedding)
            for table in replacement.emb_layers:
                torch.nn.init.zeros_(table.weight)
            model.set_input_embeddings(replacement)
            self.assertIs(model.get_input_embeddings(), replacement)
            with torch.no_grad():
                hidden = model(**inputs, output_hidden_states=True).hidden_states[0]
            self.assertEqual(hidden.abs().max().item(), 0.0)
            output = model.get_output_embeddings()
            self.assertTrue(output is None or isinstance(output, ProjectedAdaptiveLogSoftmax))

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        """The language model's labels are its input ids, as in training: the adaptive softmax's tail clusters learn
        only from tokens in them (transformers' all-zero labels would leave them without a gradient)."""
        inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is TransfoXLLMHeadModel:
            inputs["labels"] = inputs["input_ids"].clone()
        return inputs

    def assert_resize_by_clusters(self, tie_word_embeddings):
        """transformers' resize checks read one ``weight`` on each side (``nn.Embedding``, ``nn.Linear``); an
        adaptive embedding and softmax hold one table per cluster. The same checks on the clusters: a resize grows
        the input's and the softmax's last cluster (tied or not, as asked), and the model runs at the new size."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        config.tie_word_embeddings = tie_word_embeddings
        model = TransfoXLLMHeadModel(config).eval()
        model.resize_token_embeddings(VOCAB + 10)
        embedding, softmax = model.get_input_embeddings(), model.crit
        self.assertEqual((model.config.vocab_size, embedding.num_embeddings), (VOCAB + 10, VOCAB + 10))
        self.assertEqual(softmax.bounds[-1][1], VOCAB + 10)
        self.assertEqual(embedding.emb_layers[-1].weight.shape[0], softmax.out_layers[-1].weight.shape[0])
        self.assertEqual(softmax.out_layers[-1].weight is embedding.emb_layers[-1].weight, tie_word_embeddings)
        with self.assertRaisesRegex(ValueError, "not and integer"):
            model.resize_token_embeddings(VOCAB, pad_to_multiple_of=1.3)
        inputs["input_ids"][0, 0] = VOCAB + 9
        with torch.no_grad():
            self.assertEqual(model(**inputs).logits.shape[-1], VOCAB + 10)

    def test_resize_embeddings_untied(self):
        self.assert_resize_by_clusters(tie_word_embeddings=False)


class TestTransfoXlAdaptiveCommon(TestTransfoXlCommon):
    variant = "transfo-xl-adaptive"
    # transformers' check sets the vocabulary to 10, below this row's cluster cutoffs [30, 60]: the config refuses
    # it (TransfoXLConfig.cutoffs must be < vocab_size), as it should; the plain row runs the check
    test_mismatched_shapes = False

    def test_resize_tokens_embeddings(self):
        """Clusters of different widths (div_val=2): no single table for transformers' check to read."""
        self.assert_resize_by_clusters(tie_word_embeddings=True)


class RevLSHCommonTests(FamilyCommonTests, generation.GenerationTesterMixin):
    def test_bc_cache_name_forward(self):
        """transformers' check hands ``use_cache=True`` to every class; a bidirectional stack cannot honour a
        generation cache and refuses it in one line (nothing silently ignored). The check runs on the causal LM."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        with self.assertRaisesRegex(ValueError, "a generation cache is for causal stacks"):
            RevLSHModel(config)(**inputs, use_cache=True)
        with mock.patch.object(self, "all_model_classes", (RevLSHForCausalLM,)):
            super().test_bc_cache_name_forward()

    def test_attention_outputs(self):
        """transformers' check, as its Reformer tester declares the chunked shapes, on the bidirectional classes; the
        causal LM runs with a cache by default, and then returns every token's row over every position (dense, as
        generation's attention checks read them): the same check with the dense shape."""
        causal = (RevLSHForCausalLM,)
        with mock.patch.object(self, "all_model_classes", tuple(c for c in self.all_model_classes if c not in causal)):
            super().test_attention_outputs()
        for name in ("chunk_length", "encoder_seq_length", "key_length", "num_hashes"):  # (setUp makes a new tester)
            vars(self.model_tester).pop(name, None)
        with mock.patch.object(self, "all_model_classes", causal):
            super().test_attention_outputs()


class ReversibleTests(RevLSHCommonTests):
    """Reversible layers recompute their activations from the outputs in backward, by design: gradient
    checkpointing would only repeat that, and the model refuses it in one line; the hidden states it returns are
    not part of the autograd graph (nothing is kept to differentiate through them), so they cannot retain grad."""

    def assert_checkpointing_refused(self, *args, **kwargs):
        config, _ = self.model_tester.prepare_config_and_inputs_for_common()
        for model_class in self.all_model_classes:
            with self.assertRaisesRegex(ValueError, "reversible layers already recompute"):
                model_class(config).gradient_checkpointing_enable()

    test_training_gradient_checkpointing = assert_checkpointing_refused
    test_training_gradient_checkpointing_use_reentrant_false = assert_checkpointing_refused
    test_training_gradient_checkpointing_use_reentrant_true = assert_checkpointing_refused
    test_gradient_checkpointing_enable_disable = assert_checkpointing_refused
    test_gradient_checkpointing_backward_compatibility = assert_checkpointing_refused
    test_peft_gradient_checkpointing_enable_disable = assert_checkpointing_refused
    test_enable_input_require_grads_with_gradient_checkpointing = assert_checkpointing_refused

    def test_retain_grad_hidden_states_attentions(self):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        model = RevLSHModel(config).train()
        hidden_states = model(**inputs, output_hidden_states=True).hidden_states
        self.assertFalse(any(h.requires_grad for h in hidden_states[1:-1]))


class TestRevLshCommon(ReversibleTests, unittest.TestCase):
    variant = "rev-lsh"


class TestRevLshPlainCommon(RevLSHCommonTests, unittest.TestCase):
    variant = "rev-lsh-plain"


class TestRevLshRotaryCommon(ReversibleTests, unittest.TestCase):
    variant = "rev-lsh-rotary"


class TestKAdapterCommon(FamilyCommonTests, unittest.TestCase):
    variant = "k-adapter"

    def test_retain_grad_hidden_states_attentions(self):
        """The backbone is frozen and run as a fixed feature extractor, by K-Adapter's design: its hidden states
        (which the model returns) are not differentiated. The adapters' states, which train, are."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        model = KAdapterModel(config).train()
        outputs = model(**inputs, output_hidden_states=True)
        self.assertFalse(any(h.requires_grad for h in outputs.hidden_states))
        outputs.last_hidden_state.flatten()[0].backward()
        for name, parameter in model.adapters.named_parameters():
            self.assertIsNotNone(parameter.grad, name)


def add_plain_cases():
    """A row whose family the tester takes as it is gets the plain case: a new family needs no edit here, only one
    that differs from what the tester assumes writes its own case above, saying how and why."""
    written = {case.variant for case in globals().values()
               if isinstance(case, type) and issubclass(case, unittest.TestCase) and getattr(case, "variant", None)}
    for variant in TINY_CONFIGS.keys() - written:
        name = "Test" + "".join(part.title() for part in variant.replace("_", "-").split("-")) + "Common"
        globals()[name] = type(name, (FamilyCommonTests, unittest.TestCase), {"variant": variant, "__module__": __name__})


add_plain_cases()


def test_every_family_row_has_a_common_test_case():
    cases = {case.variant for case in globals().values()
             if isinstance(case, type) and issubclass(case, unittest.TestCase) and getattr(case, "variant", None)}
    assert cases == set(TINY_CONFIGS)
