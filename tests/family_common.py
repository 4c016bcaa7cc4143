"""The family tester's table: one tiny config per family (and variant), the model classes registered for it, and
inputs any of them takes. ``tests/test_family_common.py`` runs one suite over every row, in the manner of
transformers' ``ModelTesterMixin``; a new family is one entry in ``TINY_CONFIGS`` (the tester fails for a family
without one), and what the family does differently from what the tester assumes is said in its row.

Every config here is tiny (hidden sizes 16-128, two layers): the default test run builds no production-size model.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from hf_plm_ext import FAMILIES, ElectraRTDConfig, KAdapterConfig, MacBertConfig, RevLSHConfig, TransfoXLConfig

VOCAB = 99


def tiny_macbert(**overrides):
    return MacBertConfig(**{**dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=37, max_position_embeddings=64), **overrides})


def tiny_electra_rtd(**overrides):
    return ElectraRTDConfig.from_size("tiny", **{**dict(vocab_size=VOCAB, mask_token_id=4), **overrides})


def tiny_transfo_xl(**overrides):
    return TransfoXLConfig(**{**dict(vocab_size=VOCAB, adaptive=False, cutoffs=[], d_model=16, d_embed=16, n_head=2,
                                     d_head=8, d_inner=32, n_layer=2, mem_len=8, clamp_len=-1, same_length=False,
                                     dropout=0.0, eos_token_id=None), **overrides})


def tiny_transfo_xl_adaptive(**overrides):
    return tiny_transfo_xl(**{**dict(adaptive=True, cutoffs=[30, 60], div_val=2, d_embed=16), **overrides})


def tiny_rev_lsh(**overrides):
    """Chunks of 4 so that the tester's 7-token inputs are padded, chunked and hashed; every layer kind."""
    return RevLSHConfig.from_size("tiny", **{**dict(vocab_size=VOCAB, attn_layers=["local", "lsh", "full"],
                                                    position_embedding_type="absolute",
                                                    lsh_attn_chunk_length=4, local_attn_chunk_length=4,
                                                    num_hashes=2, hash_seed=0, max_position_embeddings=64,
                                                    hidden_dropout_prob=0.0, local_attention_probs_dropout_prob=0.0,
                                                    full_attention_probs_dropout_prob=0.0), **overrides})


def tiny_rev_lsh_plain(**overrides):
    """Plain residual blocks, with the output as transformers' Reformer's (the halves side by side)."""
    return tiny_rev_lsh(**{**dict(reversible=False, combine_halves="concat"), **overrides})


def tiny_rev_lsh_rotary(**overrides):
    return tiny_rev_lsh(**{**dict(position_embedding_type="rotary"), **overrides})


def tiny_k_adapter(**overrides):
    """Two adapters over a 3-layer BERT, concatenated; the backbone saved within (no path)."""
    backbone = dict(model_type="bert", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                    intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return KAdapterConfig(**{**dict(backbone_config=backbone, adapter_names=["factual", "linguistic"],
                                    adapter_size=16, adapter_num_layers=1, adapter_num_attention_heads=2,
                                    adapter_intermediate_size=32, adapter_dropout=0.0), **overrides})


def text_hidden_size(config) -> int:
    return config.get_text_config().hidden_size


@dataclass(frozen=True)
class Tiny:
    """A row of the tester's table: a tiny config (``row(**overrides)`` makes one) and what its family does
    differently from what the tester assumes."""

    make: Callable
    # each hidden state's width, from the config
    hidden_state_width: Callable = text_hidden_size
    # a forward argument that generate(**kwargs) must hand on to every step, and a value for it (generating families)
    generate_argument: tuple | None = None
    # overrides that make a smaller model of the family: an assistant for assisted decoding (generating families)
    assistant: dict | None = None

    def __call__(self, **overrides):
        return self.make(**overrides)


def both_halves(config) -> int:
    return 2 * config.hidden_size


# name -> a tiny config of that family (a variant's name says how it differs)
TINY_CONFIGS = {
    "macbert": Tiny(tiny_macbert),
    "electra-rtd": Tiny(tiny_electra_rtd),
    "transfo-xl": Tiny(tiny_transfo_xl, generate_argument=("clamp_len", 3), assistant=dict(n_layer=1)),
    "transfo-xl-adaptive": Tiny(tiny_transfo_xl_adaptive, generate_argument=("clamp_len", 3),
                                assistant=dict(n_layer=1)),
    # rev-lsh: its hidden states are the two reversible halves side by side
    "rev-lsh": Tiny(tiny_rev_lsh, both_halves, generate_argument=("num_hashes", 1),
                    assistant=dict(attn_layers=["lsh"])),
    "rev-lsh-plain": Tiny(tiny_rev_lsh_plain, both_halves, generate_argument=("num_hashes", 1),
                          assistant=dict(attn_layers=["local"])),
    "rev-lsh-rotary": Tiny(tiny_rev_lsh_rotary, both_halves, generate_argument=("num_hashes", 1),
                           assistant=dict(attn_layers=["lsh", "local"])),
    "k-adapter": Tiny(tiny_k_adapter),
}


def model_classes(config_factory) -> dict:
    """``{auto class name: model class}`` registered for the family of ``config_factory``'s config."""
    return FAMILIES[type(config_factory())]


# (variant, Auto class name, model class) for every model class of every family
CASES = [(variant, auto_name, model_class) for variant, factory in TINY_CONFIGS.items()
         for auto_name, model_class in model_classes(factory).items()]
CASE_IDS = [f"{variant}-{model_class.__name__}" for variant, _, model_class in CASES]


def input_ids(batch=2, length=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(5, VOCAB, (batch, length), generator=generator)


def first_output(outputs) -> torch.Tensor:
    """The first tensor a model returns (logits, or the last hidden state), from a ModelOutput or a tuple."""
    values = outputs.to_tuple() if hasattr(outputs, "to_tuple") else outputs
    return next(v for v in values if isinstance(v, torch.Tensor) and v.dim() > 0)


def run(model, ids, seed=0, **kwargs):
    """A forward pass with the global RNG seeded (ELECTRA's RTD model masks and samples its own inputs)."""
    torch.manual_seed(seed)
    return model(input_ids=ids, **kwargs)
