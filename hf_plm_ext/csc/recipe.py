"""The recipe of Chinese spelling correction with MacBERT4CSC: fine-tune (``finetune_csc``) and score a test file
(``evaluate_csc``: SIGHAN's definitions, ``hf_plm_ext.csc.metrics``); correcting is ``hf_plm_ext.csc.corrector``.

:func:`finetune_csc` is training pairs (generated from clean text with real confusion sets, or read from a file)
-> :func:`spelling_correction_model` (any BERT / MacBERT checkpoint) -> ``encode_spelling_pairs`` -> a
``SubLossTrainer`` (``correction_loss`` and ``detection_loss`` logged) -> the held-out pairs corrected and scored
-> the model, ``eval_results.json`` and ``eval_results.md``.
"""

from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig, AutoTokenizer, DataCollatorForTokenClassification, TrainingArguments, set_seed

from hf_plm_ext.checkpoints.loading import check_tokenizer_fits, load_pretrained
from hf_plm_ext.checkpoints.results import write_results
from hf_plm_ext.checkpoints.resuming import (CHECKPOINTS_HELP, checkpoint_to_resume, checkpoints_folder,
                                             checkpoints_of_the_run)
from hf_plm_ext.convert.bert import bert_fields
from hf_plm_ext.csc.corrector import SpellingCorrector
from hf_plm_ext.csc.data import (
    ConfusionSet,
    SpellingErrorGenerator,
    build_spelling_pairs,
    encode_spelling_pairs,
    read_clean_sentences,
    read_spelling_pairs,
)
from hf_plm_ext.csc.metrics import csc_scores
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import staged_output
from hf_plm_ext.finetuning.steps import save_run, task_trainer
from hf_plm_ext.registry import spelling_correction
from hf_plm_ext.training.trainer import SubLossTrainer

BENCHMARK, TASK_TYPE = "csc", "text2text-generation"


@dataclass
class CSCFinetuneArguments:
    model: str = field(metadata={"help": "a BERT or MacBERT checkpoint (its tokenizer beside it), or a spelling-"
                                         "correction one to train further"})
    output: str = field(metadata={"help": "new directory for the model, eval_results.json and eval_results.md"})
    checkpoints: str | None = field(default=None, metadata={"help": CHECKPOINTS_HELP})
    corpus: list[str] | None = field(default=None, metadata={"help": "clean Chinese text files: their sentences, "
                                                                     "misspelt with the confusion sets, are the "
                                                                     "training pairs"})
    train_file: str | None = field(default=None, metadata={"help": "training pairs instead: source<TAB>target "
                                                                   "lines, or SIGHAN-style JSON"})
    validation_file: str | None = field(default=None, metadata={"help": "held-out pairs (default: "
                                                                        "--validation_fraction of the training "
                                                                        "pairs, set aside)"})
    validation_fraction: float = field(default=0.05, metadata={"help": "share of the training pairs held out"})
    test_file: str | None = field(default=None, metadata={"help": "also corrected and scored at the end (e.g. "
                                                                  "SIGHAN-15 test)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training pairs"})
    max_seq_length: int = field(default=128, metadata={"help": "longer sentences are truncated"})
    clean_fraction: float = field(default=0.3, metadata={"help": "--corpus: share of sentences left without errors"})
    same_sound_probability: float = field(default=0.7, metadata={"help": "--corpus: share of errors taken from "
                                                                         "the same-sound set (the rest: same shape)"})
    correction_loss_weight: float | None = field(default=None, metadata={
        "help": "w in w * correction + (1 - w) * detection (default: the config's, 0.3 as MacBERT4CSC)"})


def spelling_correction_model(path: str, **config_overrides):
    """``path`` as the spelling-correction head its family declares (``SPELLING_CORRECTION``; MacBERT4CSC's): a
    spelling-correction checkpoint as it is; one of the family, or of a model type it starts from (BERT), with its
    encoder (and masked-LM head, if it has one) loaded key for key and the detection head new."""
    head = spelling_correction()["head"]
    family_config, starts_from = head.config_class, spelling_correction()["starts_from"]
    config = load_pretrained(AutoConfig, path, "config")
    if config.model_type in starts_from:
        config = family_config(**bert_fields(config))
    elif config.model_type != family_config.model_type:
        kinds = " or ".join(repr(kind) for kind in (*starts_from, family_config.model_type))
        raise UserInputError(f"{path} is a {config.model_type!r} checkpoint: spelling correction starts from a "
                             f"{kinds} one")
    for name, value in config_overrides.items():
        if value is not None:
            setattr(config, name, value)
    try:
        config.validate()
    except (ValueError, StrictDataclassError) as err:  # a field out of range: the config names it
        raise UserInputError(" ".join(str(err).split())) from None
    return load_pretrained(head, path, "model", config=config)


def training_pairs(args: CSCFinetuneArguments, tokenizer, seed: int):
    """``(train, validation, description)``: the pairs to train and hold out, and where they came from."""
    if bool(args.corpus) == bool(args.train_file):
        raise UserInputError("give the training data with one of --corpus (clean text, misspelt here) or "
                             "--train_file (pairs)")
    if not 0.0 < args.validation_fraction < 1.0 and args.validation_file is None:
        raise UserInputError(f"--validation_fraction must be in (0, 1), got {args.validation_fraction}")
    if args.corpus:
        sentences = read_clean_sentences(args.corpus, max_length=args.max_seq_length - 2)
        if not sentences:
            raise UserInputError(f"--corpus {' '.join(args.corpus)}: no Chinese sentences of 8 to "
                                 f"{args.max_seq_length - 2} characters")
        vocabulary = [token for token in tokenizer.get_vocab() if len(token) == 1]
        try:
            generator = SpellingErrorGenerator(ConfusionSet.from_pycorrector().restricted_to(vocabulary),
                                               clean_fraction=args.clean_fraction,
                                               same_sound_probability=args.same_sound_probability)
        except ValueError as err:
            raise UserInputError(f"--clean_fraction / --same_sound_probability: {err}") from None
        source = "misspelt sentences of " + ", ".join(Path(f).name for f in args.corpus)
        pairs = build_spelling_pairs(sentences, generator, seed)
    else:
        pairs, source = read_spelling_pairs(args.train_file), args.train_file
    if args.validation_file:
        train, validation = pairs, read_spelling_pairs(args.validation_file)
    else:
        split = pairs.train_test_split(test_size=args.validation_fraction, seed=seed)
        train, validation = split["train"], split["test"]
    if args.max_train_samples is not None:
        train = train.select(range(min(args.max_train_samples, len(train))))
    return train, validation, source


def finetune_csc(args: CSCFinetuneArguments, training_args: TrainingArguments) -> dict:
    """MacBERT4CSC fine-tuning of ``args.model``; writes the model, its tokenizer and the held-out (and test)
    scores into ``args.output`` (all or nothing)."""
    checkpoints = checkpoints_folder(args.output, args.checkpoints)
    resume = checkpoint_to_resume(training_args.resume_from_checkpoint, checkpoints)
    set_seed(training_args.seed)
    tokenizer = load_pretrained(AutoTokenizer, args.model, "tokenizer")
    train, validation, source = training_pairs(args, tokenizer, training_args.seed)
    test = read_spelling_pairs(args.test_file) if args.test_file else None
    model = spelling_correction_model(args.model, correction_loss_weight=args.correction_loss_weight)
    check_tokenizer_fits(tokenizer, model, args.model)
    train_dataset = encode_spelling_pairs(train, tokenizer, args.max_seq_length)
    with checkpoints_of_the_run(checkpoints), staged_output(args.output) as staging:
        training_args.output_dir = str(checkpoints)
        trainer = task_trainer(model, tokenizer, training_args, train_dataset, trainer_class=SubLossTrainer,
                               data_collator=DataCollatorForTokenClassification(tokenizer, pad_to_multiple_of=8))
        train_result = trainer.train(resume_from_checkpoint=resume)
        corrector = SpellingCorrector(trainer.model, tokenizer, batch_size=training_args.per_device_eval_batch_size,
                                      max_length=args.max_seq_length)
        splits = [("validation", args.validation_file or f"{args.validation_fraction:.0%} of the training pairs",
                   validation)] + ([("test", args.test_file, test)] if test is not None else [])
        results = {
            "benchmark": BENCHMARK, "task": "spelling-correction", "task_type": TASK_TYPE, "model": str(args.model),
            "train_data": str(source), "num_train_examples": len(train_dataset),
            "loss": {name: getattr(model.config, name) for name in ("correction_loss_weight",
                                                                    "detection_focal_gamma", "detection_focal_alpha")},
            "train_metrics": train_result.metrics, "sub_losses": trainer.sub_loss_history[-1:],
            "results": [score_split(corrector, name, file, pairs)[0] for name, file, pairs in splits],
            "resumed_from": resume,
        }
        save_run(trainer, staging, results)
    return results


def score_split(corrector, split: str, file, pairs, progress: bool = False) -> tuple[dict, list[str]]:
    """The split's scores (as ``eval_results.json`` lists them) and the corrected sentences."""
    predictions = [r["target"] for r in corrector(list(pairs["source"]), progress=progress)]
    return ({"split": split, "file": str(file), "num_examples": len(pairs),
             "metrics": csc_scores(pairs["source"], pairs["target"], predictions)}, predictions)


def evaluate_csc(model_path: str, test_file: str, output: str, batch_size: int = 32,
                 max_length: int | None = None) -> dict:
    """Corrects ``test_file``'s sources, scores them (``hf_plm_ext.csc.metrics``) and writes ``output``: ``eval_results.json``,
    ``eval_results.md``, ``predictions.tsv`` (``source<TAB>prediction``) and the model's card carrying the scores
    in its ``model-index`` (``README.md``), all or nothing."""
    from hf_plm_ext.hub.cards import render_card

    pairs = read_spelling_pairs(test_file)
    corrector = SpellingCorrector.from_pretrained(model_path, batch_size=batch_size, max_length=max_length)
    split, predictions = score_split(corrector, "test", test_file, pairs, progress=True)
    results = {"benchmark": BENCHMARK, "task": Path(test_file).parent.name or Path(test_file).stem,
               "task_type": TASK_TYPE, "model": str(model_path), "results": [split]}
    with staged_output(output) as staging:
        write_results(staging, results)
        (staging / "predictions.tsv").write_text("".join(f"{s}\t{p}\n" for s, p in zip(pairs["source"], predictions)),
                                                 encoding="utf-8")
        render_card(model_path, eval_results=results).save(staging / "README.md")
    return results


__all__ = ["CSCFinetuneArguments", "SpellingCorrector", "evaluate_csc", "finetune_csc", "spelling_correction_model"]
