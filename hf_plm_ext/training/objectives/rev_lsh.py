"""``rev-lsh``: long token blocks (4k-16k tokens of concatenated documents) for a reversible LSH model, masked-LM
(BERT's 80/10/10 masking) or, with ``--causal``, next-token prediction."""

from dataclasses import dataclass, field

from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, DataCollatorForLanguageModeling

from hf_plm_ext.data.token_blocks import block_frame, token_blocks
from hf_plm_ext.data.token_store.datasets import stack_examples, stack_with_causal_labels, store_blocks
from hf_plm_ext.data.tokenizer_training import check_continuations_decode, make_causal
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.training.objectives.base import MaskedInputArguments, special_token_ids
from hf_plm_ext.training.objectives.mlm import MaskedLM

SIZES = ("tiny", "small", "base")


@dataclass
class RevLSHArguments(MaskedInputArguments):
    max_seq_length: int = field(default=4096, metadata={"help": "tokens per training example (any length; a "
                                                                "fresh model's max_position_embeddings is the "
                                                                "larger of it and 4096)"})
    size: str = field(default="small", metadata={"help": "a fresh model's size: tiny (2 x 32, for tests), small "
                                                          "(6 x 256, local and LSH layers alternating), base "
                                                          "(12 x 512, trax's enwik8 pattern)"})
    causal: bool = field(default=False, metadata={"help": "causal language modelling (AutoModelForCausalLM) "
                                                          "instead of masked LM"})
    num_hashes: int | None = field(default=None, metadata={"help": "a fresh model's LSH rounds (default: 2)"})

    def __post_init__(self):
        super().__post_init__()
        if self.size not in SIZES:
            raise UserInputError(f"--size must be one of {', '.join(SIZES)}, got {self.size!r}")
        if self.num_hashes is not None and self.num_hashes < 1:
            raise UserInputError(f"--num_hashes must be at least 1, got {self.num_hashes}")


class RevLSHPretraining(MaskedLM):
    """``mlm``'s token blocks (of text or of a token store); its own config, head and collator."""

    name = "rev-lsh"
    help = "reversible LSH models over long documents: masked LM, or causal LM with --causal"
    arguments_class = RevLSHArguments
    model_types = ("rev-lsh",)
    card_fields = ("size", "causal", "max_seq_length", "mlm_probability", "num_hashes")
    demo_training = dict(per_device_train_batch_size=4, per_device_eval_batch_size=8, learning_rate=1e-3,
                         weight_decay=0.01)

    @property
    def head(self):
        return AutoModelForCausalLM if self.args.causal else AutoModelForMaskedLM

    def prepare_tokenizer(self, tokenizer):
        """A causal model's text is ``[CLS] ... [SEP]`` blocks: those are its bos and eos (generation stops at eos;
        lm-eval reads both); a prompt is ``[CLS] text``, without the eos (:func:`make_causal`)."""
        if self.args.causal:
            make_causal(tokenizer)
            check_continuations_decode(tokenizer, self.args.tokenizer)

    def fresh_config(self, tokenizer):
        from hf_plm_ext.modeling.rev_lsh import RevLSHConfig

        if not self.args.causal and tokenizer.mask_token_id is None:
            raise UserInputError("masked-LM pre-training needs a tokenizer with a mask token; pass --causal for "
                                 "next-token prediction")
        return RevLSHConfig.from_size(self.args.size, vocab_size=len(tokenizer), **special_token_ids(tokenizer),
                                      max_position_embeddings=max(4096, self.args.max_seq_length),
                                      is_decoder=self.args.causal, num_hashes=self.args.num_hashes or 2)

    def check_checkpoint(self, config, where):
        super().check_checkpoint(config, where)
        if config.is_decoder != self.args.causal:  # before loading: the causal head would make any model causal
            kind = "causal" if config.is_decoder else "bidirectional"
            raise UserInputError(f"--model {where} is {kind}: {'pass' if config.is_decoder else 'drop'} "
                                 f"--causal to continue it")

    def build_data(self, tokenizer, training_args):
        return token_blocks(self.args.corpus, tokenizer, self.args.max_seq_length, training_args.seed,
                            self.args.validation_fraction, causal=self.args.causal)

    def build_store_data(self, tokenizer, training_args):
        if not self.args.causal:
            return super().build_store_data(tokenizer, training_args)
        return store_blocks(self.args.data, tokenizer, self.args.tokenizer, self.args.max_seq_length,
                            self.args.validation_fraction, None, *block_frame(tokenizer, causal=True))

    def collator(self, tokenizer, seed):
        if self.args.data:  # blocks of one length; masked by the dataset, or their own labels (causal)
            return stack_with_causal_labels if self.args.causal else stack_examples
        return DataCollatorForLanguageModeling(tokenizer, mlm=not self.args.causal,
                                               mlm_probability=self.args.mlm_probability)

    @classmethod
    def demo_arguments(cls, corpus, tokenizer, output, validation_corpus=None):
        return RevLSHArguments(corpus=corpus, tokenizer=tokenizer, output=output, size="tiny", max_seq_length=512)

    @classmethod
    def demo_model(cls):
        return "a tiny reversible LSH encoder (2 x 32, local + LSH layers) on 512-token blocks"
