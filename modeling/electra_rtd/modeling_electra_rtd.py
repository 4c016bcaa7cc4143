"""ELECTRA replaced-token detection: generator and discriminator in one model, one loss, one optimizer.

The two halves are transformers' ``ElectraForMaskedLM`` (generator) and
``ElectraForPreTraining`` (discriminator). What this module adds is the joint step of
google-research/electra (``run_pretraining.py``, ``pretrain_helpers.py``):

1. mask ``mask_prob`` of the non-special tokens (85 % ``[MASK]``, 15 % kept, no random tokens),
   unless the caller passes masked ``input_ids`` and ``labels`` from its own collator;
2. the generator's MLM loss at the masked positions;
3. Gumbel-max sampling of replacements from the generator, without gradient;
4. discriminator labels 1 where the sampled token differs from the original (a correctly
   sampled token counts as original), its sigmoid loss over every non-pad token;
5. ``loss = gen_weight * generator_loss + disc_weight * discriminator_loss`` (1 and 50).

A pre-training run's folder also loads as its discriminator, for fine-tuning without an export step:
``AutoModel`` gives :class:`ElectraRTDModel` (the discriminator's encoder) and
``AutoModelForSequenceClassification`` gives :class:`ElectraRTDForSequenceClassification`; the generator's
weights are left unread.
"""

import functools
import inspect
from dataclasses import dataclass

import torch
from torch import nn
from transformers import ElectraForMaskedLM, ElectraForPreTraining, ElectraForSequenceClassification, ElectraModel, PreTrainedModel
from transformers.utils import ModelOutput, can_return_tuple, logging

logger = logging.get_logger(__name__)

from .configuration_electra_rtd import ElectraRTDConfig

SHARED_EMBEDDINGS = ("word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
                     "LayerNorm.weight", "LayerNorm.bias")


@dataclass
class ElectraRTDOutput(ModelOutput):
    """Output of :class:`ElectraForRTDPreTraining`.

    Args:
        loss: ``gen_weight * generator_loss + disc_weight * discriminator_loss``, a scalar.
        generator_loss: MLM cross-entropy at the masked positions, a scalar.
        discriminator_loss: replaced-token-detection sigmoid loss over non-pad tokens, a scalar.
        generator_accuracy: share of masked positions where the generator's argmax is the original.
        discriminator_accuracy: share of non-pad tokens the discriminator classifies correctly.
        discriminator_logits: ``[batch, seq]`` replaced-token logits.
        discriminator_labels: ``[batch, seq]``, 1 = replaced, 0 = original, -100 at padding.
        sampled_input_ids: ``[batch, seq]`` the discriminator's input (originals with the samples).
        hidden_states, attentions: the discriminator's, with ``output_hidden_states`` / ``output_attentions``
            (``num_hidden_layers + 1`` tensors ``[batch, seq, hidden]``; ``num_hidden_layers`` tensors
            ``[batch, heads, seq, seq]``).
    """

    loss: torch.Tensor | None = None
    generator_loss: torch.Tensor | None = None
    discriminator_loss: torch.Tensor | None = None
    generator_accuracy: torch.Tensor | None = None
    discriminator_accuracy: torch.Tensor | None = None
    discriminator_logits: torch.Tensor | None = None
    discriminator_labels: torch.Tensor | None = None
    sampled_input_ids: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@functools.cache
def _forward_parameters(model_class) -> frozenset:
    return frozenset(inspect.signature(model_class.forward).parameters) - {"self", "kwargs"}


def refuse_unknown_keywords(model, args, kwargs):
    """A forward pre-hook: a keyword the model does not honour is an error, not silently ignored (transformers'
    models take ``**kwargs`` and pass them down, where an unknown one vanishes)."""
    unknown = sorted(set(kwargs) - _forward_parameters(type(model)) - set(model.passed_on_keywords))
    if unknown:
        raise TypeError(f"{type(model).__name__}.forward() got unexpected arguments {unknown}")


class ElectraRTDPreTrainedModel(PreTrainedModel):
    config: ElectraRTDConfig
    base_model_prefix = "discriminator"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    accepts_loss_kwargs = False  # the loss is a mean: the Trainer scales it for gradient accumulation
    # what forward's **kwargs pass on to transformers' ELECTRA, which honours them
    passed_on_keywords = ("position_ids", "inputs_embeds", "output_attentions", "output_hidden_states", "return_dict",
                          "past_key_values", "cache", "use_cache")

    def post_init(self):
        super().post_init()
        self.register_forward_pre_hook(refuse_unknown_keywords, with_kwargs=True)

    def _output_flags(self, kwargs: dict) -> dict:
        """``kwargs`` with the config's ``output_hidden_states`` / ``output_attentions`` where the call leaves them
        unset, as transformers' models read them (the halves have configs of their own)."""
        for name in ("output_hidden_states", "output_attentions"):
            if kwargs.get(name) is None and getattr(self.config, name):
                kwargs[name] = True
        return kwargs

    def _record_vocab_size(self, vocab_size: int):
        """Both halves' configs are saved: each must say the size after a resize, or the next load fails."""
        for part in (self.config.discriminator_config, self.config.generator_config):
            part.vocab_size = vocab_size
        for module in self.children():
            if isinstance(module, PreTrainedModel):
                module.config.vocab_size = vocab_size


class ElectraForRTDPreTraining(ElectraRTDPreTrainedModel):
    """Generator (``self.generator``, an ``ElectraForMaskedLM``) + discriminator
    (``self.discriminator``, an ``ElectraForPreTraining``), embeddings shared when
    ``config.tie_embeddings``."""

    # {tied: source}: one embedding module serves both halves (the generator adds its own output-layer tie).
    _tied_weights_keys = {f"generator.electra.embeddings.{name}": f"discriminator.electra.embeddings.{name}"
                          for name in SHARED_EMBEDDINGS}

    passed_on_keywords = ("position_ids", "return_dict")  # (to both halves)

    def __init__(self, config: ElectraRTDConfig):
        super().__init__(config)
        generator = ElectraForMaskedLM(config.generator_config)
        # registered first, so that the shared embeddings are named (and so initialised, when a checkpoint lacks
        # them) as the discriminator's, the tie's source: a missing tied target is not initialised, and on the meta
        # device (from_pretrained) the table stayed there
        self.discriminator = ElectraForPreTraining(config.discriminator_config)
        self.generator = generator
        if config.tie_embeddings:
            self.generator.electra.embeddings = self.discriminator.electra.embeddings
        else:
            self._tied_weights_keys = {}  # the generator still ties its own output layer to its embeddings
        self.post_init()

    def mark_tied_weights_as_initialized(self, loading_info):
        """As transformers', except for the embeddings the halves share as one module: their tied names (the
        generator's) are the source's own parameters, so transformers' flag would mark a missing source as loaded too
        and leave it on the meta device, uninitialised. Where the checkpoint lacks the source, it stays missing."""
        sources = {f"discriminator.electra.embeddings.{name}" for name in SHARED_EMBEDDINGS
                   if self.config.tie_embeddings}
        missing_sources = sources & set(loading_info.missing_keys)
        super().mark_tied_weights_as_initialized(loading_info)
        for name in missing_sources:
            self.get_parameter(name)._is_hf_initialized = False
            loading_info.missing_keys.add(name)

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        """As transformers', with chains resolved: the generator ties its output layer to *its* word
        embeddings, which are themselves the discriminator's, so point every tied weight at the source."""
        tied = super().get_expanded_tied_weights_keys(all_submodels)
        resolved = {}
        for target, source in tied.items():
            while source in tied:
                source = tied[source]
            resolved[target] = source
        return resolved

    def get_input_embeddings(self):
        return self.discriminator.get_input_embeddings()

    def set_input_embeddings(self, embeddings):
        self.discriminator.set_input_embeddings(embeddings)  # shared with the generator when tied

    def resize_token_embeddings(self, *args, **kwargs):
        if not self.config.tie_embeddings:  # the generator has its own table and head: resize them too
            self.generator.resize_token_embeddings(*args, **kwargs)
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        self._record_vocab_size(embeddings.num_embeddings)
        return embeddings

    def get_output_embeddings(self):
        return self.generator.generator_lm_head

    def set_output_embeddings(self, embeddings):
        self.generator.generator_lm_head = embeddings

    def mask_tokens(self, input_ids, attention_mask=None, special_tokens_mask=None):
        """ELECTRA's masking: ``[batch, seq]`` ids -> (masked ids, labels with -100 at unmasked positions).

        Exactly ``max(1, round(mask_prob * n))`` of the ``n`` non-special, non-pad tokens of each
        row are chosen (google-research/electra ``pretrain_helpers.mask``); 85 % of them become
        ``[MASK]``, the rest keep their token. Random draws use torch's global generator.
        """
        if self.config.mask_token_id is None:
            raise ValueError("ElectraRTDConfig.mask_token_id is not set; set it, or pass masked input_ids and labels")
        candidates = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        if special_tokens_mask is not None:
            candidates &= ~special_tokens_mask.bool()
        else:
            pad_token_id = self.config.discriminator_config.pad_token_id
            candidates &= (input_ids != self.config.mask_token_id) & (input_ids != pad_token_id)
        counts = candidates.sum(-1, keepdim=True)
        to_predict = (counts.float() * self.config.mask_prob).round().clamp(min=1).minimum(counts)
        scores = torch.rand(input_ids.shape, device=input_ids.device).masked_fill(~candidates, -1.0)
        rank = scores.argsort(-1, descending=True).argsort(-1)
        masked = (rank < to_predict) & candidates
        shown_as_mask = masked & (torch.rand(input_ids.shape, device=input_ids.device) < self.config.mask_replace_prob)
        labels = input_ids.masked_fill(~masked, -100)
        return input_ids.masked_fill(shown_as_mask, self.config.mask_token_id), labels

    def sample_replacements(self, logits, originals):
        """Gumbel-max samples from ``logits / temperature`` (``[n, vocab]``), never differentiated."""
        with torch.no_grad():
            logits = logits.detach().float() / self.config.temperature
            if self.config.disallow_correct:
                logits = logits.scatter_add(-1, originals[:, None], torch.full_like(logits[:, :1], -1000.0))
            uniform = torch.rand_like(logits)
            gumbel = -torch.log(-torch.log(uniform + 1e-9) + 1e-9)
            return (logits + gumbel).argmax(-1)

    @can_return_tuple
    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, special_tokens_mask=None,
                return_loss=True, output_hidden_states=None, output_attentions=None,
                **kwargs) -> ElectraRTDOutput | tuple:
        r"""
        Args:
            input_ids: ``[batch, seq]`` token ids; original text when ``labels`` is None (the model
                masks), otherwise already masked by a collator.
            labels: ``[batch, seq]`` original ids at masked positions, -100 elsewhere (optional).
            special_tokens_mask: ``[batch, seq]``, 1 at tokens never to mask, e.g. from
                ``tokenizer(..., return_special_tokens_mask=True)``; without it only padding and
                ``[MASK]`` are recognised (by id), so ``[CLS]``/``[SEP]`` may be masked.
            output_hidden_states, output_attentions: return the discriminator's.
            return_dict: False returns the output's fields that are set, as a tuple (``can_return_tuple``).
        """
        flags = self._output_flags(dict(output_hidden_states=output_hidden_states, output_attentions=output_attentions))
        output_hidden_states, output_attentions = flags["output_hidden_states"], flags["output_attentions"]
        if labels is None:
            input_ids, labels = self.mask_tokens(input_ids, attention_mask, special_tokens_mask)
        masked = labels != -100
        generator_hidden = self.generator.electra(input_ids, attention_mask=attention_mask,
                                                  token_type_ids=token_type_ids, return_dict=True,
                                                  **kwargs).last_hidden_state
        # Vocabulary logits only where they are used: the masked positions.
        generator_logits = self.generator.generator_lm_head(
            self.generator.generator_predictions(generator_hidden[masked]))
        targets = labels[masked]
        generator_loss = nn.functional.cross_entropy(generator_logits.float(), targets)

        sampled = self.sample_replacements(generator_logits, targets)
        originals = torch.where(masked, labels, input_ids)
        sampled_input_ids = originals.masked_scatter(masked, sampled)
        replaced = (sampled_input_ids != originals).float()
        discriminator_outputs = self.discriminator(sampled_input_ids, attention_mask=attention_mask,
                                                   token_type_ids=token_type_ids,
                                                   output_hidden_states=output_hidden_states,
                                                   output_attentions=output_attentions, return_dict=True, **kwargs)
        discriminator_logits = discriminator_outputs.logits
        active = torch.ones_like(replaced) if attention_mask is None else attention_mask.float()
        per_token = nn.functional.binary_cross_entropy_with_logits(discriminator_logits.float(), replaced,
                                                                   reduction="none")
        discriminator_loss = (per_token * active).sum() / (active.sum() + 1e-6)
        loss = self.config.gen_weight * generator_loss + self.config.disc_weight * discriminator_loss

        with torch.no_grad():
            generator_accuracy = (generator_logits.argmax(-1) == targets).float().mean()
            correct = ((discriminator_logits > 0).float() == replaced).float()
            discriminator_accuracy = (correct * active).sum() / active.sum().clamp(min=1)
        return ElectraRTDOutput(
            loss=loss if return_loss else None, generator_loss=generator_loss, discriminator_loss=discriminator_loss,
            generator_accuracy=generator_accuracy, discriminator_accuracy=discriminator_accuracy,
            discriminator_logits=discriminator_logits,
            discriminator_labels=replaced.long().masked_fill(active == 0, -100), sampled_input_ids=sampled_input_ids,
            hidden_states=discriminator_outputs.hidden_states, attentions=discriminator_outputs.attentions,
        )

    @classmethod
    def from_discriminator_and_generator(cls, discriminator, generator, **config_fields) -> "ElectraForRTDPreTraining":
        """Continue ELECTRA pre-training from stock checkpoints: ``discriminator`` an ``ElectraForPreTraining`` and
        ``generator`` an ``ElectraForMaskedLM`` (the models, or their folders or Hub ids, e.g. the released ELECTRA
        pairs). ``config_fields`` are further :class:`ElectraRTDConfig` fields (``mask_token_id``, ``mask_prob``, ...).

        With ``tie_embeddings`` (the default) the pair shares the discriminator's embeddings, as after joint
        training (Google's released pairs hold the same tables in both); where the generator's own differ, a warning
        says so and they are not used.
        """
        if not isinstance(discriminator, PreTrainedModel):
            discriminator = ElectraForPreTraining.from_pretrained(discriminator)
        if not isinstance(generator, PreTrainedModel):
            generator = ElectraForMaskedLM.from_pretrained(generator)
        model = cls(ElectraRTDConfig(discriminator_config=discriminator.config, generator_config=generator.config,
                                     **config_fields))
        model.generator.load_state_dict(generator.state_dict())
        model.discriminator.load_state_dict(discriminator.state_dict())  # last: its embeddings win where shared
        if model.config.tie_embeddings:
            own, shared = generator.electra.embeddings.state_dict(), discriminator.electra.embeddings.state_dict()
            differing = [name for name in SHARED_EMBEDDINGS if not torch.equal(own[name], shared[name])]
            if differing:
                logger.warning(f"the generator's own embeddings ({', '.join(differing)}) differ from the "
                               f"discriminator's; the pair shares the discriminator's, as ELECTRA trains them")
        return model

    def save_discriminator(self, directory, **kwargs):
        """Save the discriminator as a plain ``electra`` checkpoint (stock transformers, no remote code)."""
        self.discriminator.save_pretrained(directory, **kwargs)

    def save_generator(self, directory, **kwargs):
        """Save the generator as a plain ``electra`` masked-LM checkpoint (with the shared embeddings)."""
        self.generator.save_pretrained(directory, **kwargs)


class ElectraRTDDiscriminatorModel(ElectraRTDPreTrainedModel):
    """What the discriminator half of a run's folder loads as: the generator's weights are not read."""

    _tied_weights_keys = {}
    _keys_to_ignore_on_load_unexpected = [r"^generator\.", r"^discriminator\.discriminator_predictions\."]

    def get_input_embeddings(self):
        return self.discriminator.electra.get_input_embeddings()

    def set_input_embeddings(self, embeddings):
        self.discriminator.electra.set_input_embeddings(embeddings)

    def resize_token_embeddings(self, *args, **kwargs):
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        self._record_vocab_size(embeddings.num_embeddings)
        return embeddings


class ElectraRTDModel(ElectraRTDDiscriminatorModel):
    """The discriminator's encoder (``self.discriminator.electra``, an ``ElectraModel``) of an ``electra-rtd``
    checkpoint; its forward is ``ElectraModel``'s (``last_hidden_state``: ``[batch, seq, hidden]``)."""

    def __init__(self, config: ElectraRTDConfig):
        super().__init__(config)
        # a container, so the parameter names are the run's own (discriminator.electra.*)
        self.discriminator = nn.ModuleDict({"electra": ElectraModel(config.discriminator_config)})
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        return self.discriminator.electra(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                          return_dict=True, **self._output_flags(kwargs))


class ElectraRTDForSequenceClassification(ElectraRTDDiscriminatorModel):
    """The discriminator with transformers' ELECTRA classification head (``self.discriminator``, an
    ``ElectraForSequenceClassification``; the head is new). The label fields of the config (``num_labels``,
    ``id2label``, ``problem_type``, ``classifier_dropout``) are the discriminator's. Forward and output are
    ``ElectraForSequenceClassification``'s (``logits``: ``[batch, num_labels]``)."""

    def __init__(self, config: ElectraRTDConfig):
        super().__init__(config)
        discriminator_config = config.discriminator_config
        discriminator_config.id2label, discriminator_config.label2id = config.id2label, config.label2id
        discriminator_config.problem_type = config.problem_type
        if hasattr(config, "classifier_dropout"):
            discriminator_config.classifier_dropout = config.classifier_dropout
        self.discriminator = ElectraForSequenceClassification(discriminator_config)
        self.post_init()

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        outputs = self.discriminator(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                     labels=labels, return_dict=True, **self._output_flags(kwargs))
        self.config.problem_type = self.discriminator.config.problem_type  # transformers infers it on first use
        return outputs


__all__ = ["ElectraForRTDPreTraining", "ElectraRTDForSequenceClassification", "ElectraRTDModel", "ElectraRTDOutput",
           "ElectraRTDPreTrainedModel"]
