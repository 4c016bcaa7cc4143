"""TinyBERT's two-stage recipe: general distillation on unlabelled text, task distillation on a GLUE/CLUE task.

:func:`distill_task` composes the GLUE/CLUE runner's steps in one pass (the checkpoints -> the student ->
``load_task_data`` -> ``encode_splits``, with TinyBERT's augmentation if asked -> a :class:`DistillationTrainer` per
stage -> ``evaluate_models`` -> the student saved with its results and card);
:func:`distill_general` distils an encoder on token blocks of text files.
"""

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import (AutoModel, AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,
                          TrainingArguments, set_seed)

from hf_plm_ext.checkpoints.loading import (check_same_tokenizer, check_sequence_length, check_tokenizer_fits,
                                            load_pretrained)
from hf_plm_ext.checkpoints.results import write_results
from hf_plm_ext.checkpoints.resuming import (CHECKPOINTS_HELP, checkpoint_to_resume, checkpoints_folder,
                                             checkpoints_of_the_run, refuse_resume)
from hf_plm_ext.checkpoints.saving import save_final
from hf_plm_ext.distill.layer_map import layer_map_from
from hf_plm_ext.distill.student import STUDENT_PRESETS, student_config, student_from_teacher_layers
from hf_plm_ext.distill.trainer import DistillationArguments, DistillationTrainer
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.eval.readers import load_task_data
from hf_plm_ext.eval.tasks import get_task
from hf_plm_ext.files import staged_output
from hf_plm_ext.finetuning import FinetuneArguments
from hf_plm_ext.finetuning.steps import encode_splits, evaluate_models, parameter_counts
from hf_plm_ext.hub.cards import render_card

STUDENT_HELP = (f"a fresh student of the teacher's family and vocabulary: a preset ({', '.join(STUDENT_PRESETS)}) "
                f"or a JSON file of config fields to change (e.g. {{\"num_hidden_layers\": 2}})")
LAYERS_HELP = ("a student made of the teacher's own layers (DistilBERT's initialisation): 'uniform:M' (M layers "
               "spread as TinyBERT's map), 'last:M', or teacher layers as '2,4,6'")


@dataclass
class DistillTaskArguments:
    teacher: str = field(metadata={"help": "the teacher: a classifier fine-tuned on the task (e.g. by `hf-plm-ext "
                                           "finetune`)"})
    task: str = field(metadata={"help": "benchmark/task, e.g. glue/sst2 or clue/tnews"})
    output: str = field(metadata={"help": "new folder for the student, its results and card"})
    student: str | None = field(default=None, metadata={"help": "a student checkpoint to start from (e.g. one "
                                                                "from `distill general`)"})
    student_config: str | None = field(default=None, metadata={"help": STUDENT_HELP})
    student_layers: str | None = field(default=None, metadata={"help": LAYERS_HELP})
    data_dir: str | None = field(default=None, metadata={"help": "folder with the task's files under their "
                                                                  "official names"})
    train_file: str | None = None
    validation_file: str | None = None
    max_seq_length: int = 128
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training examples"})
    augment: int = field(default=0, metadata={"help": "TinyBERT's data augmentation: this many augmented copies "
                                                      "of each training example (TinyBERT: 30; 0: none)"})
    augment_candidates: int = field(default=15, metadata={"help": "replacement candidates per word (TinyBERT: 15)"})
    augment_probability: float = field(default=0.4, metadata={"help": "chance of replacing each word (TinyBERT: 0.4)"})
    augment_mlm: str | None = field(default=None, metadata={
        "help": "a masked LM of the teacher's vocabulary: its predictions replace single-piece words (default: "
                "embedding neighbours for every word)"})
    prediction_epochs: float = field(default=3.0, metadata={"help": "epochs of the prediction stage (TinyBERT: 3); "
                                                                    "--num_train_epochs is the intermediate stage's"})
    prediction_learning_rate: float = field(default=3e-5, metadata={
        "help": "learning rate of the prediction stage (TinyBERT: 3e-5); --learning_rate is the intermediate "
                "stage's"})


@dataclass
class DistillGeneralArguments:
    teacher: str = field(metadata={"help": "the teacher encoder (not fine-tuned: TinyBERT's general distillation)"})
    output: str = field(metadata={"help": "new folder for the student encoder"})
    student: str | None = field(default=None, metadata={"help": "a student checkpoint to continue (e.g. a "
                                                                "published general student such as TinyBERT's "
                                                                "4L-312D), saved as the type it is"})
    corpus: list[str] | None = field(default=None, metadata={"help": "text files, one document or line of text per "
                                                                     "line (or --data)", "nargs": "+"})
    data: str | None = field(default=None, metadata={"help": "a token store (from `hf-plm-ext corpus prepare`, with "
                                                             "the teacher's tokenizer) instead of --corpus"})
    checkpoints: str | None = field(default=None, metadata={"help": CHECKPOINTS_HELP})
    student_config: str | None = field(default=None, metadata={"help": STUDENT_HELP})
    student_layers: str | None = field(default=None, metadata={"help": LAYERS_HELP})
    max_seq_length: int = field(default=128, metadata={"help": "token block length"})
    validation_fraction: float = field(default=0.05, metadata={"help": "blocks held out for the evaluation loss"})
    max_eval_samples: int | None = field(default=None, metadata={
        "help": "evaluate on at most this many held-out blocks (default: all of --corpus's; 10,000 of --data's)"})

    def __post_init__(self):
        if (self.corpus is None) == (self.data is None):
            raise UserInputError("give the text with --corpus FILES, or a token store with --data STORE (from "
                                 "`hf-plm-ext corpus prepare`), one of the two")


def parse_task(spec: str) -> tuple[str, str]:
    benchmark, _, task = spec.partition("/")
    if not task:
        raise UserInputError(f"--task is benchmark/task, e.g. glue/sst2; got {spec!r}")
    return benchmark, task


def stages_of(distill_args: DistillationArguments) -> list[str]:
    return distill_args.stage.split(",")


def build_student(args, teacher, head_class):
    """The student ``args`` ask for: a checkpoint, a fresh config, or some of the teacher's layers."""
    chosen = [name for name in ("student", "student_config", "student_layers") if getattr(args, name, None)]
    if len(chosen) != 1:
        raise UserInputError("give one of --student, --student-config or --student-layers"
                             + (f" (got {', '.join('--' + c.replace('_', '-') for c in chosen)})" if chosen else ""))
    try:
        if chosen[0] == "student_config":
            return head_class.from_config(student_config(teacher.config, args.student_config))
        if chosen[0] == "student_layers":
            return student_from_teacher_layers(teacher, teacher_layers_of(args.student_layers, teacher))
    except ValueError as err:
        raise UserInputError(f"--{chosen[0].replace('_', '-')}: {err}") from None
    return None  # --student: loaded by the caller, as its head needs


def teacher_layers_of(spec: str, teacher) -> list[int]:
    depth = teacher.config.num_hidden_layers
    kind, _, count = spec.partition(":")
    if kind in ("uniform", "last"):
        if not count.isdigit():
            raise ValueError(f"{kind} takes the student's depth, as '{kind}:2'; got {spec!r}")
        return list(layer_map_from(kind, int(count), depth).teacher_layers)
    return list(layer_map_from(spec, len(spec.split(",")), depth).teacher_layers)


def check_same_vocabulary(student_config, teacher_config):
    if student_config.vocab_size != teacher_config.vocab_size:
        raise UserInputError(f"student and teacher must share a vocabulary: the student has "
                             f"{student_config.vocab_size} tokens, the teacher {teacher_config.vocab_size}")


def check_teacher_for_task(teacher, task_name: str, num_labels: int, is_regression: bool, where, label_names=None):
    if getattr(teacher, "newly_initialised_modules", None):
        raise UserInputError(f"--teacher {where} is not fine-tuned for {task_name}: its "
                             f"{', '.join(teacher.newly_initialised_modules)} would start random (fine-tune it "
                             f"first: hf-plm-ext finetune)")
    if teacher.config.num_labels != num_labels:
        raise UserInputError(f"--teacher {where} has a classifier of {teacher.config.num_labels} labels; {task_name} "
                             f"has {num_labels}: the teacher must be fine-tuned for this task")
    if (teacher.config.problem_type == "regression") != is_regression:
        raise UserInputError(f"--teacher {where} is a {teacher.config.problem_type or 'classification'} model; "
                             f"{task_name} is {'a regression' if is_regression else 'a classification'} task")
    trained_for = getattr(teacher.config, "finetuning_task", None)  # what `finetune` records
    if trained_for and trained_for != task_name:
        raise UserInputError(f"--teacher {where} was fine-tuned for {trained_for}, not {task_name}: the teacher "
                             f"must be fine-tuned for this task")
    teacher_labels = [teacher.config.id2label[i] for i in range(num_labels)] if not is_regression else None
    if label_names and teacher_labels != [f"LABEL_{i}" for i in range(num_labels)] and \
            teacher_labels != list(label_names):  # (LABEL_i: a classifier that names no labels)
        raise UserInputError(f"--teacher {where} predicts the labels {teacher_labels}; {task_name}'s are "
                             f"{list(label_names)}: the teacher must be fine-tuned for this task")


def distill_task(args: DistillTaskArguments, distill_args: DistillationArguments,
                 training_args: TrainingArguments) -> dict:
    """Distil ``args.teacher`` into a student on one GLUE/CLUE task, stage after stage (``distill_args.stage``,
    e.g. ``intermediate,prediction``), evaluate the student and the teacher, and write the student with
    ``eval_results.json``, ``distill_results.json`` and its card into ``args.output`` (all or nothing).

    One pass over the steps: the task; the checkpoints; the student; the runner's data (augmented inside its
    encoding step); the stages; the runner's evaluation; saving, results and card. The runner is visited twice,
    before and after training: its evaluation needs the trained student."""
    refuse_resume(training_args, "distill task", "run it again (its stages are short), or resume a long general "
                  "distillation (`distill general --resume_from_checkpoint last`)")
    set_seed(training_args.seed)
    benchmark, task_name = parse_task(args.task)
    task = get_task(benchmark, task_name)
    labels = (task.name, task.num_labels, task.is_regression)  # what the teacher is checked against
    tokenizer = load_pretrained(AutoTokenizer, args.teacher, "teacher tokenizer")
    teacher = load_pretrained(AutoModelForSequenceClassification, args.teacher, "teacher")
    check_tokenizer_fits(tokenizer, teacher, args.teacher)  # and so the student, which shares its vocabulary
    check_sequence_length(teacher, args.max_seq_length)
    student = None
    if args.student and not (args.student_config or args.student_layers):
        student = load_pretrained(AutoModelForSequenceClassification, args.student, "student",
                                  **label_fields(teacher.config))
        check_same_tokenizer(tokenizer, args.teacher, args.student)
        check_sequence_length(student, args.max_seq_length)
    check_teacher_for_task(teacher, *labels, args.teacher, label_names=task.labels)
    student = student or build_student(args, teacher, AutoModelForSequenceClassification)
    check_same_vocabulary(student.config, teacher.config)

    augmentation = {}

    def augment(examples):
        with training_args.main_process_first(desc="augmentation"):  # rank 0 writes the cache, the others read it
            augmented = augmented_training_examples(args, examples, data.train_file, tokenizer, teacher)
        augmentation.update(copies=args.augment, candidates=args.augment_candidates,
                            probability=args.augment_probability, masked_lm=args.augment_mlm,
                            original_examples=len(examples), augmented_examples=len(augmented))
        return augmented

    finetune_args = FinetuneArguments(task=task_name, model=args.teacher, output=args.output, data_dir=args.data_dir,
                                      train_file=args.train_file, validation_file=args.validation_file,
                                      max_seq_length=args.max_seq_length, max_train_samples=args.max_train_samples)
    data = load_task_data(benchmark, finetune_args)
    train_dataset, eval_datasets = encode_splits(data, tokenizer, finetune_args, augment if args.augment else None)

    stage_settings = {"intermediate": (training_args.num_train_epochs, training_args.learning_rate),
                      "prediction": (args.prediction_epochs, args.prediction_learning_rate),
                      "both": (training_args.num_train_epochs, training_args.learning_rate)}
    with staged_output(args.output) as staging:
        stages = []
        for index, stage in enumerate(stages_of(distill_args), start=1):
            epochs, learning_rate = stage_settings[stage]
            stage_args = dataclasses.replace(training_args, output_dir=str(staging / f"stage-{index}-{stage}"),
                                             num_train_epochs=epochs, learning_rate=learning_rate)
            try:
                trainer = DistillationTrainer(model=student, teacher=teacher, args=stage_args,
                                              distillation_args=dataclasses.replace(distill_args, stage=stage),
                                              train_dataset=train_dataset, processing_class=tokenizer,
                                              data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8))
            except ValueError as err:
                raise UserInputError(str(err)) from None
            train_result = trainer.train()
            trainer.accelerator.unwrap_model(trainer.model).remove_hooks()
            stages.append({"stage": stage, "epochs": epochs, "learning_rate": learning_rate,
                           "max_steps": stage_args.max_steps if stage_args.max_steps > 0 else None,
                           "train_metrics": train_result.metrics, "sub_losses": trainer.sub_loss_history[-1:]})
            _remove_folder(staging / f"stage-{index}-{stage}")
        eval_args = dataclasses.replace(training_args, output_dir=str(staging / "evaluation"))
        evaluated = evaluate_models({"student": student, "teacher": teacher}, tokenizer, data, eval_datasets,
                                    eval_args)
        (evaluator, student_results, student_parameters), (_, teacher_results, teacher_parameters) = (
            evaluated["student"], evaluated["teacher"])
        distillation = {"teacher": str(args.teacher), "teacher_parameters": teacher_parameters["total"],
                        "student_parameters": student_parameters["total"],
                        "student_from": _student_source(args), "augmentation": augmentation or None,
                        "stages": stages, "arguments": dataclasses.asdict(distill_args),
                        "teacher_results": teacher_results}
        results = {"benchmark": benchmark, "task": labels[0], "model": _student_source(args),
                   "train_file": str(data.train_file), "num_train_examples": len(train_dataset),
                   "world_size": training_args.world_size, "parameters": student_parameters,
                   "distillation": distillation, "results": student_results}
        save_final(evaluator, staging)
        _remove_folder(staging / "evaluation")
        if evaluator.is_world_process_zero():
            write_results(staging, results)
            render_card(staging).save(str(staging / "README.md"))
    return results


def label_fields(config) -> dict:
    """A classifier config's label fields, for a head of the same labels."""
    return {"num_labels": config.num_labels, "problem_type": config.problem_type, "id2label": config.id2label,
            "label2id": config.label2id}


def augmented_training_examples(args: DistillTaskArguments, examples, train_file, tokenizer, teacher):
    """TinyBERT's augmentation of ``examples`` (cached by the training file, its size and time, and the settings)."""
    from hf_plm_ext.data.augmentation import TinyBertAugmenter, augment_examples
    from hf_plm_ext.data.similar_words import EmbeddingNeighbours

    masked_lm = None
    if args.augment_mlm:
        from transformers import AutoModelForMaskedLM

        masked_lm = load_pretrained(AutoModelForMaskedLM, args.augment_mlm, "--augment-mlm masked LM").eval()
        if getattr(masked_lm, "newly_initialised_modules", None):
            raise UserInputError(f"--augment-mlm {args.augment_mlm} has no trained masked-LM head "
                                 f"({', '.join(masked_lm.newly_initialised_modules)} would start random)")
        check_same_vocabulary(masked_lm.config, teacher.config)
    try:
        augmenter = TinyBertAugmenter(tokenizer, EmbeddingNeighbours.from_model(teacher, tokenizer), masked_lm,
                                      num_candidates=args.augment_candidates,
                                      replace_probability=args.augment_probability, copies=args.augment)
    except ValueError as err:
        raise UserInputError(f"--augment: {err}") from None
    stat = Path(train_file).stat()
    key = {"train_file": str(Path(train_file).resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns,
           "examples": len(examples), "vocabulary": teacher.config.vocab_size, "teacher": str(args.teacher),
           "masked_lm": args.augment_mlm}
    return augment_examples(examples, augmenter, key)


def distill_general(args: DistillGeneralArguments, distill_args: DistillationArguments,
                    training_args: TrainingArguments) -> dict:
    """TinyBERT's general distillation: the intermediate losses only, on token blocks of ``args.corpus``; the
    student encoder, ``distill_results.json`` and its card go into ``args.output`` (all or nothing)."""
    from hf_plm_ext.data.token_blocks import block_frame, token_blocks
    from hf_plm_ext.data.token_store.datasets import STORE_EVAL_SAMPLES, at_most, store_blocks

    if stages_of(distill_args) != ["intermediate"]:
        raise UserInputError(f"general distillation has only the intermediate stage (unlabelled text has no "
                             f"predictions to match); got --stage {distill_args.stage}")
    checkpoints = checkpoints_folder(args.output, args.checkpoints)
    resume = checkpoint_to_resume(training_args.resume_from_checkpoint, checkpoints)
    set_seed(training_args.seed)
    tokenizer = load_pretrained(AutoTokenizer, args.teacher, "teacher tokenizer")
    teacher = load_pretrained(AutoModel, args.teacher, "teacher")
    student = build_student(args, teacher, AutoModel)
    if student is None:  # --student
        student = load_pretrained(AutoModel, args.student, "student")
        check_same_tokenizer(tokenizer, args.teacher, args.student)
        check_sequence_length(student, args.max_seq_length)
    check_same_vocabulary(student.config, teacher.config)
    if args.data:  # the teacher's folder is the tokenizer the store must have been made with
        blocks = store_blocks(args.data, tokenizer, args.teacher, args.max_seq_length, args.validation_fraction,
                              None, *block_frame(tokenizer))
    else:
        blocks = token_blocks(args.corpus, tokenizer, args.max_seq_length, training_args.seed,
                              args.validation_fraction)
    blocks["test"] = at_most(blocks["test"], args.max_eval_samples or (STORE_EVAL_SAMPLES if args.data else None))
    with checkpoints_of_the_run(checkpoints), staged_output(args.output) as staging:
        training_args = dataclasses.replace(training_args, output_dir=str(checkpoints))
        try:
            trainer = DistillationTrainer(model=student, teacher=teacher, distillation_args=distill_args,
                                          args=training_args, train_dataset=blocks["train"],
                                          eval_dataset=blocks["test"], processing_class=tokenizer,
                                          data_collator=_block_collator)
        except ValueError as err:
            raise UserInputError(str(err)) from None
        initial = trainer.evaluate()["eval_loss"]
        train_result = trainer.train(resume_from_checkpoint=resume)
        final = trainer.evaluate()["eval_loss"]
        trainer.accelerator.unwrap_model(trainer.model).remove_hooks()
        results = {"teacher": str(args.teacher), "corpus": [str(p) for p in args.corpus or []], "data": args.data,
                   "student_from": _student_source(args), "train_blocks": len(blocks["train"]),
                   "held_out_blocks": len(blocks["test"]), "block_length": args.max_seq_length,
                   "teacher_parameters": parameter_counts(teacher)["total"],
                   "student_parameters": parameter_counts(trainer.student)["total"],
                   "stages": [{"stage": "intermediate", "epochs": training_args.num_train_epochs,
                               "learning_rate": training_args.learning_rate,
                               "train_metrics": train_result.metrics, "sub_losses": trainer.sub_loss_history[-1:]}],
                   "initial_eval_loss": initial, "final_eval_loss": final,
                   "arguments": dataclasses.asdict(distill_args), "world_size": training_args.world_size,
                   "resumed_from": resume}
        save_final(trainer, staging)
        if trainer.is_world_process_zero():
            (staging / "distill_results.json").write_text(json.dumps(results, indent=2) + "\n")
            render_card(staging).save(str(staging / "README.md"))
    return results


def _block_collator(rows):
    import torch

    ids = torch.stack([torch.as_tensor(row["input_ids"]) for row in rows])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _student_source(args) -> str:
    if getattr(args, "student", None):
        return str(args.student)
    if args.student_config:
        return f"config {args.student_config}"
    return f"teacher layers {args.student_layers}"


def _remove_folder(path: Path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)
