"""What every pre-training objective shares: the common arguments and the :class:`Objective` hooks.

An objective is data + loss: a dataset builder, a collator that makes the inputs and labels, and the model
head whose ``forward`` turns them into a loss. ``pretrain()`` (``hf_plm_ext.training.pretrain``) drives any
objective through the same steps, calling its hooks; it knows nothing of any one objective.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from transformers import AutoConfig

from hf_plm_ext.checkpoints.loading import (check_same_tokenizer, check_sequence_length, check_tokenizer_fits,
                                            load_pretrained)
from hf_plm_ext.checkpoints.resuming import CHECKPOINTS_HELP
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.training.trainer import SubLossTrainer


@dataclass
class PretrainArguments:
    """The flags of every objective; each objective's arguments subclass this."""

    output: str = field(metadata={"help": "new directory for the pre-trained model"})
    tokenizer: str | None = field(default=None, metadata={"help": "tokenizer directory (e.g. from `hf-plm-ext "
                                                                   "tokenizer train`); default: --model's own"})
    corpus: list[str] | None = field(default=None, metadata={"help": "UTF-8 text files, one paragraph or sentence "
                                                                     "per line (or --data)"})
    data: str | None = field(default=None, metadata={"help": "a token store (from `hf-plm-ext corpus prepare`) "
                                                             "instead of --corpus: tokenised once, read through "
                                                             "memory maps, resumed exactly"})
    checkpoints: str | None = field(default=None, metadata={"help": CHECKPOINTS_HELP})
    model: str | None = field(default=None, metadata={"help": "continue from this checkpoint (its settings are "
                                                               "kept) instead of a fresh model"})
    config_overrides: str | None = field(default=None, metadata={"help": "fresh model's config, e.g. "
                                                                          "'hidden_size=128,num_hidden_layers=2'"})
    validation_fraction: float = field(default=0.05, metadata={"help": "held-out share of the examples"})
    max_eval_samples: int | None = field(default=None, metadata={
        "help": "evaluate on at most this many held-out examples (default: all of --corpus's; 10,000 of --data's, "
                "whose held-out share of a large store would take hours at every evaluation)"})

    def __post_init__(self):
        if self.tokenizer is None:
            if self.model is None:
                raise UserInputError("give --tokenizer DIR (a fresh model's), or --model DIR, whose tokenizer is "
                                     "then used")
            self.tokenizer = self.model
        if self.max_eval_samples is not None and self.max_eval_samples < 1:
            raise UserInputError(f"--max_eval_samples must be at least 1, got {self.max_eval_samples}")
        if (self.corpus is None) == (self.data is None):
            raise UserInputError("give the text with --corpus FILES, or a token store with --data STORE (from "
                                 "`hf-plm-ext corpus prepare`), one of the two")
        if not 0.0 < self.validation_fraction < 1.0:
            raise UserInputError(f"--validation_fraction must be in (0, 1), got {self.validation_fraction}")


@dataclass
class MaskedInputArguments(PretrainArguments):
    """The flags of objectives that mask an encoder's input (mlm, macbert, electra)."""

    max_seq_length: int = field(default=128, metadata={"help": "tokens per training example"})
    mlm_probability: float = field(default=0.15, metadata={"help": "share of the tokens to mask (macbert: of the "
                                                                  "words)"})

    def __post_init__(self):
        super().__post_init__()
        if self.max_seq_length < 8:
            raise UserInputError(f"--max_seq_length must be at least 8, got {self.max_seq_length}")
        check_probability("mlm_probability", self.mlm_probability)


def check_probability(name: str, value: float):
    if not 0.0 < value < 1.0:
        raise UserInputError(f"--{name} must be in (0, 1), got {value}")


def special_token_ids(tokenizer) -> dict:
    """``pad/bos/eos_token_id`` as ``tokenizer`` has them (None where it has none): a fresh config's, so that
    padding, generation and the clients that read the config (lm-eval, pipelines) use the tokens the model is
    trained with, not a family's defaults."""
    return {f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ("pad", "bos", "eos")}


def encoder_config(model_type: str, tokenizer, max_seq_length: int):
    """A fresh config of family ``model_type`` sized for ``tokenizer`` and ``max_seq_length``."""
    from hf_plm_ext.registry import supported_model_types

    if model_type not in supported_model_types():
        raise UserInputError(f"unknown --model_type {model_type!r}; choose one of {supported_model_types()}")
    return AutoConfig.for_model(model_type, vocab_size=len(tokenizer), **special_token_ids(tokenizer),
                                max_position_embeddings=max(512, max_seq_length))


class Objective:
    """A pre-training objective. Subclasses set the class attributes and override the hooks they need.

    ``pretrain()`` calls, in order: :meth:`prepare_tokenizer`, :meth:`start_from`, :meth:`fresh_config` (a fresh
    model) or :meth:`check_checkpoint`, :meth:`load_checkpoint` and :meth:`configure_checkpoint` (``--model``),
    :meth:`collator`, :meth:`build_data`
    (``--corpus``) or :meth:`build_store_data` (``--data``),
    :meth:`configure_training`, :meth:`trainer_kwargs`, and after training :meth:`extra_results`.
    """

    name: ClassVar[str]
    help: ClassVar[str]
    arguments_class: ClassVar[type[PretrainArguments]]
    head: ClassVar[type]  # the Auto class whose model computes the loss
    model_types: ClassVar[tuple[str, ...] | None] = None  # the families `--model` may be; None: any `head` loads
    trainer_class: ClassVar[type] = SubLossTrainer
    label_names: ClassVar[tuple[str, ...] | None] = None  # the batch's label keys (empty: the model labels itself)
    card_fields: ClassVar[tuple[str, ...]] = ()  # arguments shown in the model card's pre-training table
    demo_pipeline: ClassVar[str] = "encoder"  # `hf-plm-ext demo`: "encoder" (then SST-2) or "language-model"
    demo_training: ClassVar[dict] = {}  # TrainingArguments of the demo's pre-training step

    def __init__(self, args: PretrainArguments):
        if type(args) is not self.arguments_class:
            raise TypeError(f"the {self.name!r} objective takes {self.arguments_class.__name__}, got "
                            f"{type(args).__name__}")
        self.args = args

    def prepare_tokenizer(self, tokenizer):
        """Name the special tokens the objective's data uses where the tokenizer leaves them unnamed (e.g. the
        token that ends a causal LM's text as ``eos_token``); the tokenizer is saved with the model."""

    def fresh_config(self, tokenizer):
        """The config of a fresh model (before ``--config_overrides``); its special-token ids are the tokenizer's
        (:func:`special_token_ids`)."""
        raise NotImplementedError

    def start_from(self, tokenizer):
        """A model the objective's own flags name (ELECTRA's ``--generator`` / ``--discriminator``), or None."""
        return None

    def check_checkpoint(self, config, where: str):
        """Refuse a ``--model`` whose family this objective cannot train."""
        if self.model_types is not None and config.model_type not in self.model_types:
            raise UserInputError(f"--model {where} is a {config.model_type!r} checkpoint; `pretrain {self.name}` "
                                 f"trains {' or '.join(repr(t) for t in self.model_types)} models")
        if type(config) not in self.head._model_mapping:
            raise UserInputError(f"--model {where} is a {config.model_type!r} checkpoint, which has no "
                                 f"{self.head.__name__} head for `pretrain {self.name}`")

    def load_checkpoint(self, config, where: str):
        """The model of ``--model`` (its ``config`` passed :meth:`check_checkpoint`), with its weights."""
        return load_pretrained(self.head, where, "model")

    def configure_checkpoint(self, model, tokenizer, where: str):
        """Check (or set) what ``--model`` must agree on; its own settings are kept unless a flag says otherwise."""
        check_tokenizer_fits(tokenizer, model, self.args.tokenizer, where)
        check_same_tokenizer(tokenizer, self.args.tokenizer, where)
        if hasattr(self.args, "max_seq_length"):
            check_sequence_length(model, self.args.max_seq_length)

    def collator(self, tokenizer, seed: int):
        raise NotImplementedError

    def build_data(self, tokenizer, training_args) -> dict:
        """``{"train": dataset, "test": dataset}`` (the held-out split) of ``--corpus``."""
        raise NotImplementedError

    def build_store_data(self, tokenizer, training_args) -> dict:
        """As :meth:`build_data`, of the token store ``--data`` (``hf_plm_ext.data.token_store``): map-style
        datasets whose examples and masks depend on their index alone."""
        raise UserInputError(f"`pretrain {self.name}` does not read a token store yet; give the text with --corpus")

    def configure_training(self, training_args):
        """Adjust ``TrainingArguments`` to what the objective needs (label names, sampling order, ...)."""
        if self.label_names is not None:
            training_args.label_names = list(self.label_names)

    def trainer_kwargs(self) -> dict:
        """Keyword arguments of :attr:`trainer_class` beyond the model, data, collator and tokenizer."""
        return {}

    def extra_results(self, final_metrics: dict) -> dict:
        """Entries of ``pretrain_results.json`` beyond the common ones."""
        return {}

    @classmethod
    def card_rows(cls, results: dict) -> dict:
        """Rows of the model card's pre-training table from ``pretrain_results.json`` beyond :attr:`card_fields`."""
        return {}

    @classmethod
    def demo_arguments(cls, corpus: list[str], tokenizer: str, output: str,
                       validation_corpus: list[str] | None = None) -> PretrainArguments:
        """The tiny run of ``hf-plm-ext demo --objective NAME`` (``validation_corpus``: held-out text, where the
        objective reads one; the others hold out a share of the corpus)."""
        raise NotImplementedError

    @classmethod
    def demo_model(cls) -> str:
        """What the demo pre-trains, in a few words."""
        raise NotImplementedError

    @classmethod
    def checkpoint_to_finetune(cls, run_dir: Path, scratch: Path) -> Path:
        """The folder the demo fine-tunes after pre-training (e.g. an exported encoder)."""
        return run_dir
