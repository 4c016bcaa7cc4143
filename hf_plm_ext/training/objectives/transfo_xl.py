"""``transfo-xl``: the corpus as one token stream in ``per_device_train_batch_size`` parallel streams of ``--tgt-len``
segments, read in order with the memory carried from batch to batch (``--mem-len``); next-token loss, evaluation
reports perplexity."""

from dataclasses import dataclass, field

from huggingface_hub.errors import StrictDataclassError
from transformers import AutoModelForCausalLM, default_data_collator

from hf_plm_ext.data.segment_streams import StreamSegments, eos_id, tokenize_stream
from hf_plm_ext.data.token_store.datasets import DocumentStream
from hf_plm_ext.data.token_store.format import TokenStore
from hf_plm_ext.data.tokenizer_training import pad_with_eos
from hf_plm_ext.errors import UserInputError, last_line
from hf_plm_ext.training.objectives.base import Objective, PretrainArguments, special_token_ids
from hf_plm_ext.modeling.transfo_xl.configuration_transfo_xl import FRESH_DEFAULTS
from hf_plm_ext.training.segment_memory import SegmentMemoryTrainer


@dataclass
class TransfoXLArguments(PretrainArguments):
    size: str = field(default="small", metadata={"help": "a fresh model's size: tiny (2 x 128), small (4 x 256), "
                                                          "base (16 x 410, the paper's WikiText-103 base)"})
    validation_corpus: list[str] | None = field(default=None, metadata={
        "help": "held-out text files (default: the last --validation_fraction of the corpus)"})
    tgt_len: int = field(default=128, metadata={"help": "tokens per segment"})
    mem_len: int | None = field(default=None, metadata={
        "help": f"remembered tokens per layer (0: none; default: {FRESH_DEFAULTS['mem_len']} for a fresh model, the "
                f"checkpoint's own with --model)"})
    cutoffs: str | None = field(default=None, metadata={
        "help": "a fresh model's adaptive input/softmax cluster boundaries, e.g. '20000,40000' (default: plain "
                "softmax)"})

    def __post_init__(self):
        if self.max_eval_samples is not None:
            raise UserInputError("--max_eval_samples: transfo-xl evaluates its held-out stream whole (its segments "
                                 "continue each other); give a shorter --validation_corpus instead")
        super().__post_init__()
        if self.mem_len is not None and self.mem_len < 0:
            raise UserInputError(f"--mem-len must be >= 0 (0: no memory), got {self.mem_len}")
        parse_cutoffs(self.cutoffs)  # a malformed --cutoffs is refused before anything loads


def parse_cutoffs(cutoffs: str | None) -> list[int]:
    """``--cutoffs '20000,40000'`` -> ``[20000, 40000]`` (none: ``[]``, a plain softmax)."""
    try:
        return [int(c) for c in cutoffs.split(",")] if cutoffs else []
    except ValueError:
        raise UserInputError(f"--cutoffs {cutoffs!r}: give increasing integers, e.g. '20000,40000'") from None


class TransfoXLLanguageModel(Objective):
    name = "transfo-xl"
    help = "Transformer-XL language modelling: consecutive segments with the memory carried through the Trainer"
    arguments_class = TransfoXLArguments
    head = AutoModelForCausalLM
    model_types = ("transfo-xl",)
    trainer_class = SegmentMemoryTrainer  # batches continue each other, in order
    label_names = ("shift_labels",)
    card_fields = ("size", "tgt_len", "mem_len", "cutoffs", "validation_corpus")
    demo_pipeline = "language-model"
    demo_training = dict(per_device_train_batch_size=16, per_device_eval_batch_size=16, learning_rate=1e-3,
                         max_grad_norm=0.25)

    def prepare_tokenizer(self, tokenizer):
        """The token that ends every line of the stream is the tokenizer's eos (generation stops there), and pads
        where the tokenizer has no pad token (clients pad batches)."""
        if tokenizer.eos_token is None:
            tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos_id(tokenizer))
        if tokenizer.pad_token is None:
            pad_with_eos(tokenizer)

    def fresh_config(self, tokenizer):
        from hf_plm_ext.modeling.transfo_xl import TransfoXLConfig

        args, cutoffs = self.args, parse_cutoffs(self.args.cutoffs)
        # ids can skip one: a corpus word equal to a special token (WikiText's literal <unk>) keeps its id
        vocab_size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
        try:
            memory = {} if args.mem_len is None else {"mem_len": args.mem_len}
            return TransfoXLConfig.from_size(
                args.size, vocab_size=vocab_size, cutoffs=cutoffs, adaptive=bool(cutoffs),
                **{**special_token_ids(tokenizer), "eos_token_id": eos_id(tokenizer)}, **memory)
        except (ValueError, StrictDataclassError) as err:
            raise UserInputError(f"transfo-xl model: {last_line(err)}") from None

    def configure_checkpoint(self, model, tokenizer, where):
        super().configure_checkpoint(model, tokenizer, where)
        if self.args.mem_len is not None:  # asked for: the model trains, and is saved, with this memory
            model.config.mem_len = self.args.mem_len

    def collator(self, tokenizer, seed):
        return default_data_collator  # a batch's segments are equally long

    def build_data(self, tokenizer, training_args):
        args = self.args
        stream = tokenize_stream(args.corpus, tokenizer)
        if args.validation_corpus:
            held_out = tokenize_stream(args.validation_corpus, tokenizer)
        else:
            cut = len(stream) - max(2, int(len(stream) * args.validation_fraction))
            stream, held_out = stream[:cut], stream[cut:]
        world = training_args.world_size
        return {"train": StreamSegments(stream, training_args.per_device_train_batch_size, args.tgt_len, world),
                "test": StreamSegments(held_out, training_args.per_device_eval_batch_size, args.tgt_len, world)}

    def build_store_data(self, tokenizer, training_args):
        """The store's documents as the text path's stream (each followed by ``<eos>``), read through the memory
        maps: the streams stay contiguous, interleaved over the ranks as from text."""
        args = self.args
        if args.validation_corpus:
            raise UserInputError("--validation_corpus with --data: the held-out stream is the store's last "
                                 "--validation_fraction; prepare the held-out text as a store of its own run")
        stream = DocumentStream(TokenStore(args.data, args.tokenizer), eos_id(tokenizer))
        train, held_out = stream.split(len(stream) - max(2, int(len(stream) * args.validation_fraction)))
        world = training_args.world_size
        return {"train": StreamSegments(train, training_args.per_device_train_batch_size, args.tgt_len, world),
                "test": StreamSegments(held_out, training_args.per_device_eval_batch_size, args.tgt_len, world)}

    def configure_training(self, training_args):
        super().configure_training(training_args)
        training_args.train_sampling_strategy = "sequential"  # the batches continue each other

    def extra_results(self, final_metrics):
        return {"final_eval_perplexity": final_metrics["eval_perplexity"]}  # per predicted token

    @classmethod
    def card_rows(cls, results):
        perplexity = results.get("final_eval_perplexity")
        return {} if perplexity is None else {"held-out perplexity": round(perplexity, 2)}

    @classmethod
    def demo_arguments(cls, corpus, tokenizer, output, validation_corpus=None):
        return TransfoXLArguments(corpus=corpus, tokenizer=tokenizer, output=output, size="tiny", tgt_len=64,
                                  mem_len=64, validation_corpus=validation_corpus)

    @classmethod
    def demo_model(cls):
        return "a tiny Transformer-XL (2 x 128) on segments of 64 tokens with 64 remembered"
