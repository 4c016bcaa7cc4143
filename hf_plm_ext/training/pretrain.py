"""Pre-train an encoder of one of the package's families from raw text with the stock ``Trainer``.

An objective is data + loss: a dataset builder, a collator that makes the inputs and labels,
and the model head that turns them into a loss. ``OBJECTIVES`` maps an objective's name to
them; families add their objectives there (``--objective``).

* ``mlm``: token blocks, BERT's random-token masking, a masked-LM head.
* ``macbert``: documents -> SOP pairs with word ids, MacBERT's correction masking (or plain
  ``[MASK]`` whole-word N-gram masking with ``--masking mask``), correction-MLM + SOP heads.
* ``electra``: token blocks; the ``electra-rtd`` model masks, samples and discriminates itself
  (``--size``), evaluation reports the discriminator's AUC.
* ``transfo-xl``: the corpus as one token stream in ``per_device_train_batch_size`` parallel
  streams of ``--tgt_len`` segments, read in order with the memory carried from batch to batch
  (``--mem_len``); next-token loss, evaluation reports perplexity.
"""

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from datasets import load_dataset
from huggingface_hub.errors import StrictDataclassError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
    default_data_collator,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking, jieba_spans
from hf_plm_ext.data.replaced_token_detection import SpecialTokensMaskCollator, rtd_metrics
from hf_plm_ext.data.segment_streams import StreamSegments, eos_id, tokenize_stream
from hf_plm_ext.data.similar_words import load_similar_words
from hf_plm_ext.data.sop import build_sop_pairs
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_file, staged_output
from hf_plm_ext.registry import supported_model_types
from hf_plm_ext.training.checks import check_sequence_length, check_tokenizer_fits, load_pretrained
from hf_plm_ext.training.saving import save_final
from hf_plm_ext.training.segment_memory import SegmentMemoryTrainer
from hf_plm_ext.training.trainer import SubLossTrainer


@dataclass
class PretrainArguments:
    corpus: list[str] = field(metadata={"help": "UTF-8 text files, one paragraph or sentence per line"})
    tokenizer: str = field(metadata={"help": "tokenizer directory (e.g. from `hf-plm-ext tokenizer train`)"})
    output: str = field(metadata={"help": "new directory for the pre-trained model"})
    checkpoints: str | None = field(default=None, metadata={"help": "folder for the Trainer's checkpoints "
                                                                     "(default: OUTPUT.checkpoints); kept if the "
                                                                     "run stops, removed once the model is saved"})
    model: str | None = field(default=None, metadata={"help": "continue from this checkpoint instead of a "
                                                               "fresh model"})
    model_type: str = field(default="macbert", metadata={"help": "family of a fresh model"})
    config_overrides: str | None = field(default=None, metadata={"help": "fresh model's config, e.g. "
                                                                          "'hidden_size=128,num_hidden_layers=2'"})
    objective: str = field(default="mlm", metadata={"help": "pre-training objective"})
    max_seq_length: int = field(default=128, metadata={"help": "tokens per training block"})
    mlm_probability: float = field(default=0.15, metadata={"help": "mlm: fraction of tokens to predict; "
                                                                  "macbert: fraction of words"})
    validation_fraction: float = field(default=0.05, metadata={"help": "held-out share of the examples"})
    masking: str = field(default="correction", metadata={"help": "macbert: 'correction' (similar words) or "
                                                                  "'mask' ([MASK] ablation)"})
    similar_words: str | None = field(default=None, metadata={"help": "macbert: 'cilin', 'embeddings:MODEL_DIR' "
                                                                       "or a synonym-table file"})
    segmenter: str | None = field(default=None, metadata={"help": "macbert: 'jieba' for Chinese words; default: "
                                                                   "the tokenizer's words"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "macbert: share of shorter SOP targets"})
    size: str = field(default="small", metadata={"help": "electra: discriminator size, tiny (2 x 128), small "
                                                          "(12 x 256) or base (12 x 768); generator 1/4 (base 1/3). "
                                                          "transfo-xl: tiny (2 x 128), small (4 x 256), base "
                                                          "(16 x 410, the paper's WikiText-103 base)"})
    validation_corpus: list[str] | None = field(default=None, metadata={
        "help": "transfo-xl: held-out text files (default: the last --validation_fraction of the corpus)"})
    tgt_len: int = field(default=128, metadata={"aliases": ["--tgt-len"],
                                                "help": "transfo-xl: tokens per segment"})
    mem_len: int = field(default=128, metadata={"aliases": ["--mem-len"],
                                                "help": "transfo-xl: remembered tokens per layer (0: none)"})
    cutoffs: str | None = field(default=None, metadata={
        "help": "transfo-xl: adaptive input/softmax cluster boundaries, e.g. '20000,40000' (default: plain softmax)"})


@dataclass(frozen=True)
class Objective:
    head: type  # the Auto class whose model computes the loss
    build_data: Callable  # (tokenizer, args, training_args) -> {"train": dataset, "test": dataset}
    make_collator: Callable  # (tokenizer, args, seed) -> collator
    fresh_config: Callable | None = None  # (tokenizer, args) -> config; default: --model_type's
    compute_metrics: Callable | None = None  # evaluation metrics from the model's outputs
    label_names: tuple | None = None  # the batch's label keys (empty: the model makes its labels itself)
    trainer_class: type = SubLossTrainer  # SegmentMemoryTrainer: batches continue each other, in order


def _mlm_data(tokenizer, args, training_args):
    return token_blocks(args.corpus, tokenizer, args.max_seq_length, training_args.seed, args.validation_fraction)


def _mlm_collator(tokenizer, args, seed):
    return DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mlm_probability, pad_to_multiple_of=8)


def _segmenter(args):
    if args.segmenter is None:
        return None
    if args.segmenter != "jieba":
        raise UserInputError(f"unknown --segmenter {args.segmenter!r}; choose 'jieba' (or none)")
    return jieba_spans


def _macbert_data(tokenizer, args, training_args):
    seed = training_args.seed
    files = [str(check_file(f, "corpus file")) for f in args.corpus]
    documents = load_dataset("text", data_files={"train": files}, sample_by="paragraph")["train"]
    pairs = documents.map(build_sop_pairs, batched=True, with_indices=True, remove_columns=["text"],
                          desc="SOP pairs", fn_kwargs={"tokenizer": tokenizer, "max_length": args.max_seq_length,
                                                       "short_seq_prob": args.short_seq_prob,
                                                       "segmenter": _segmenter(args), "seed": seed})
    if len(pairs) < 2:
        raise UserInputError(f"the corpus ({', '.join(files)}) gives fewer than 2 sentence pairs")
    return _hold_out(pairs, args.validation_fraction, seed)


def _macbert_collator(tokenizer, args, seed):
    if args.masking not in ("correction", "mask"):
        raise UserInputError(f"unknown --masking {args.masking!r}; choose 'correction' or 'mask'")
    similar = None
    if args.masking == "correction":
        if args.similar_words is None:
            raise UserInputError("--masking correction needs --similar_words: 'cilin', 'embeddings:MODEL_DIR' or a "
                                 "synonym-table file")
        similar = load_similar_words(args.similar_words)
    return DataCollatorForCorrectionMasking(tokenizer, similar, mode=args.masking, word_mask_prob=args.mlm_probability,
                                            seed=seed, pad_to_multiple_of=8)


def _electra_collator(tokenizer, args, seed):
    return SpecialTokensMaskCollator(tokenizer)


def _electra_config(tokenizer, args):
    from hf_plm_ext.modeling.electra_rtd import ElectraRTDConfig

    if tokenizer.mask_token_id is None:
        raise UserInputError(f"the tokenizer in {args.tokenizer} has no mask token; ELECTRA's generator needs one")
    try:
        config = ElectraRTDConfig.from_size(args.size, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                            mask_token_id=tokenizer.mask_token_id, mask_prob=args.mlm_probability)
    except ValueError as err:
        raise UserInputError(f"--size {args.size!r}: {_last_line(err)}") from None
    for part in (config.discriminator_config, config.generator_config):
        part.max_position_embeddings = max(part.max_position_embeddings, args.max_seq_length)
    return config


def _transfo_xl_data(tokenizer, args, training_args):
    stream = tokenize_stream(args.corpus, tokenizer)
    if args.validation_corpus:
        held_out = tokenize_stream(args.validation_corpus, tokenizer)
    else:
        cut = len(stream) - max(2, int(len(stream) * args.validation_fraction))
        stream, held_out = stream[:cut], stream[cut:]
    world = training_args.world_size
    return {"train": StreamSegments(stream, training_args.per_device_train_batch_size, args.tgt_len, world),
            "test": StreamSegments(held_out, training_args.per_device_eval_batch_size, args.tgt_len, world)}


def _stack_collator(tokenizer, args, seed):
    return default_data_collator  # a batch's segments are equally long


def _transfo_xl_config(tokenizer, args):
    from hf_plm_ext.modeling.transfo_xl import TransfoXLConfig

    sizes = {"tiny": dict(n_layer=2, d_model=128, n_head=2, d_head=64, d_inner=512),
             "small": dict(n_layer=4, d_model=256, n_head=4, d_head=64, d_inner=1024),
             "base": dict(n_layer=16, d_model=410, n_head=10, d_head=41, d_inner=2100)}
    if args.size not in sizes:
        raise UserInputError(f"unknown --size {args.size!r} for transfo-xl; choose one of {list(sizes)}")
    try:
        cutoffs = [int(c) for c in args.cutoffs.split(",")] if args.cutoffs else []
        # ids can skip one: a corpus word equal to a special token (WikiText's literal <unk>) keeps its id
        vocab_size = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
        return TransfoXLConfig(vocab_size=vocab_size, **sizes[args.size], d_embed=sizes[args.size]["d_model"],
                               cutoffs=cutoffs, adaptive=bool(cutoffs), div_val=1, mem_len=args.mem_len,
                               clamp_len=-1, same_length=False, dropout=0.1, dropatt=0.0,
                               eos_token_id=eos_id(tokenizer), pad_token_id=tokenizer.pad_token_id)
    except (ValueError, StrictDataclassError) as err:
        raise UserInputError(f"transfo-xl model: {_last_line(err)}") from None


OBJECTIVES = {
    "mlm": Objective(AutoModelForMaskedLM, _mlm_data, _mlm_collator),
    "macbert": Objective(AutoModelForPreTraining, _macbert_data, _macbert_collator),
    "electra": Objective(AutoModelForPreTraining, _mlm_data, _electra_collator, fresh_config=_electra_config,
                         compute_metrics=rtd_metrics, label_names=()),
    "transfo-xl": Objective(AutoModelForCausalLM, _transfo_xl_data, _stack_collator, fresh_config=_transfo_xl_config,
                            label_names=("shift_labels",), trainer_class=SegmentMemoryTrainer),
}


def token_blocks(corpus_files, tokenizer, block_length, seed=0, validation_fraction=0.05):
    """Tokenise text files and cut the token stream into ``[CLS] ... [SEP]`` blocks of ``block_length``.

    Returns a ``DatasetDict`` with ``train`` and ``test`` (held-out) splits of ``input_ids``.
    """
    files = [str(check_file(f, "corpus file")) for f in corpus_files]
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise UserInputError("the tokenizer has no [CLS]/[SEP] tokens; encoders need both")
    if block_length < 8:
        raise UserInputError(f"--max_seq_length must be at least 8, got {block_length}")
    raw = load_dataset("text", data_files={"train": files})["train"]
    body = block_length - 2

    def to_blocks(batch):
        ids = [i for line in tokenizer(batch["text"], add_special_tokens=False)["input_ids"] for i in line]
        blocks = [ids[start:start + body] for start in range(0, len(ids) - body + 1, body)]
        return {"input_ids": [[tokenizer.cls_token_id, *b, tokenizer.sep_token_id] for b in blocks]}

    blocks = raw.map(to_blocks, batched=True, batch_size=2000, remove_columns=["text"], desc="token blocks")
    if len(blocks) < 2:
        raise UserInputError(f"the corpus ({', '.join(files)}) gives fewer than 2 blocks of {block_length} tokens")
    return _hold_out(blocks, validation_fraction, seed)


def _hold_out(dataset, fraction, seed):
    """``train`` and ``test`` splits, at least one example held out."""
    return dataset.train_test_split(test_size=max(1, int(len(dataset) * fraction)), seed=seed)


def build_model(args: PretrainArguments, tokenizer, model_class, fresh_config=None):
    if args.model is not None:
        model = load_pretrained(model_class, args.model, "model")
        check_tokenizer_fits(tokenizer, model, args.tokenizer)
        check_sequence_length(model, args.max_seq_length)
        return model
    if fresh_config is not None:
        config = fresh_config(tokenizer, args)
    elif args.model_type not in supported_model_types():
        raise UserInputError(f"unknown --model_type {args.model_type!r}; choose one of {supported_model_types()}")
    else:
        config = AutoConfig.for_model(args.model_type, vocab_size=len(tokenizer),
                                      pad_token_id=tokenizer.pad_token_id,
                                      max_position_embeddings=max(512, args.max_seq_length))
    if args.config_overrides:
        try:
            config.update_from_string(args.config_overrides)
            config.validate()
        except (ValueError, AttributeError, TypeError, StrictDataclassError) as err:
            raise UserInputError(f"--config_overrides {args.config_overrides!r}: {_last_line(err)}") from None
    return model_class.from_config(config)


def _last_line(err):
    return str(err).strip().splitlines()[-1].strip()


def checkpoint_to_resume(resume_from_checkpoint, checkpoints: Path):
    """``--resume_from_checkpoint``: a checkpoint folder, or ``last`` for the newest one in ``checkpoints``."""
    if resume_from_checkpoint is None:
        if checkpoints.is_dir() and get_last_checkpoint(str(checkpoints)) is not None:
            raise UserInputError(f"{checkpoints} holds checkpoints of an earlier run; continue it with "
                                 f"--resume_from_checkpoint last, or remove the folder")
        return None
    if resume_from_checkpoint == "last":
        last = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
        if last is None:
            raise UserInputError(f"--resume_from_checkpoint last: no checkpoint-* folder in {checkpoints}")
        return last
    if not Path(resume_from_checkpoint, "trainer_state.json").is_file():
        raise UserInputError(f"--resume_from_checkpoint {resume_from_checkpoint} is not a Trainer checkpoint "
                             f"(no trainer_state.json)")
    return resume_from_checkpoint


def initial_evaluation(log_history: list[dict]) -> dict:
    """The run's first evaluation (``eval_on_start``, before any update), as ``initial_*`` metrics. A resumed run's
    history, restored from its checkpoint, starts with the stopped run's first evaluation."""
    first = next(entry for entry in log_history if "eval_loss" in entry)
    return {"initial" + name.removeprefix("eval"): value for name, value in first.items() if name.startswith("eval_")}


def pretrain(args: PretrainArguments, training_args: TrainingArguments) -> dict:
    """Pre-train with ``args.objective``; write the model, tokenizer and ``pretrain_results.json``.

    Checkpoints go to ``args.checkpoints`` (default ``OUTPUT.checkpoints``), where a stopped run
    leaves them for ``--resume_from_checkpoint last``; they are removed once the model is saved.
    """
    if args.objective not in OBJECTIVES:
        raise UserInputError(f"unknown objective {args.objective!r}; choose one of {list(OBJECTIVES)}")
    objective = OBJECTIVES[args.objective]
    set_seed(training_args.seed)  # the fresh model is made here, before the Trainer seeds itself
    checkpoints = Path(args.checkpoints or f"{args.output}.checkpoints")
    resume = checkpoint_to_resume(training_args.resume_from_checkpoint, checkpoints)
    tokenizer = load_pretrained(AutoTokenizer, args.tokenizer, "tokenizer")
    model = build_model(args, tokenizer, objective.head, objective.fresh_config)
    collator = objective.make_collator(tokenizer, args, training_args.seed)
    with training_args.main_process_first(desc="pre-training data"):
        data = objective.build_data(tokenizer, args, training_args)
    training_args.output_dir = str(checkpoints)
    training_args.remove_unused_columns = False  # the builders make exactly what the collators read
    if objective.label_names is not None:
        training_args.label_names = list(objective.label_names)
    if objective.compute_metrics is None:
        training_args.prediction_loss_only = True  # nothing reads the logits: do not gather them
    if objective.trainer_class is SegmentMemoryTrainer:
        training_args.train_sampling_strategy = "sequential"  # the batches continue each other
        if args.mem_len < 0:
            raise UserInputError(f"--mem-len must be >= 0 (0: no memory), got {args.mem_len}")
        model.config.mem_len = args.mem_len
    trainer = objective.trainer_class(model=model, args=training_args, train_dataset=data["train"],
                                      eval_dataset=data["test"], processing_class=tokenizer, data_collator=collator,
                                      compute_metrics=objective.compute_metrics)
    trainer.model_accepts_loss_kwargs = False  # heads return batch means
    # The first evaluation runs inside train(), after the model is wrapped for DDP: an evaluate() before train()
    # marks it prepared (accelerate 1.15, transformers 5.24), train() then leaves it unwrapped, and every rank
    # trains its own copy
    training_args.eval_on_start = True
    with staged_output(args.output) as staging:
        train_result = trainer.train(resume_from_checkpoint=resume)
        initial = initial_evaluation(trainer.state.log_history)
        final = trainer.evaluate()
        results = {
            "objective": args.objective,
            "arguments": asdict(args),
            "model_type": model.config.model_type,
            "num_parameters": model.num_parameters(),
            "world_size": training_args.world_size,
            "train_examples": len(data["train"]),
            "validation_examples": len(data["test"]),
            "max_seq_length": args.max_seq_length,
            "resumed_from": resume,
            "initial_eval_loss": initial["initial_loss"],
            "final_eval_loss": final["eval_loss"],
            "initial_eval_metrics": initial,
            "final_eval_metrics": final,
            "train_metrics": train_result.metrics,
            "train_sub_losses": trainer.sub_loss_history,
        }
        if objective.trainer_class is SegmentMemoryTrainer:
            results["final_eval_perplexity"] = final["eval_perplexity"]  # per predicted token
        if trainer.is_world_process_zero():
            save_final(trainer, staging)
            (staging / "pretrain_results.json").write_text(json.dumps(results, indent=2) + "\n")
    if trainer.is_world_process_zero():
        _remove_checkpoints(checkpoints)
    return results


def _remove_checkpoints(folder: Path):
    """Delete the Trainer's ``checkpoint-*`` folders, and ``folder`` itself if nothing else is in it."""
    for checkpoint in folder.glob("checkpoint-*"):
        shutil.rmtree(checkpoint, ignore_errors=True)
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
