"""``DistillationTrainer``: the stock ``Trainer`` on a student that learns from a teacher.

The student and its projections form one module, :class:`DistillationModel`, whose ``forward`` runs the teacher
(eval mode, no grad, outside the module tree: not trained, saved or wrapped by DDP) and the student on the same
batch and returns the weighted sum of the sub-losses as ``loss`` with every sub-loss beside it
(``embedding_loss``, ``hidden_loss``, ``attention_loss``, ``value_relation_loss``, ``prediction_loss``,
``label_loss``), which :class:`SubLossTrainer` logs. The optimizer, DDP and checkpoints see the student and its
projections; the trainer's ``save_model`` writes the student alone, a stock checkpoint of its family.
"""

import functools
import inspect
from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import ModelOutput

from hf_plm_ext.distill.features import AttentionProjections
from hf_plm_ext.distill.layer_map import layer_map_from
from hf_plm_ext.distill.losses import (ATTENTION_LOSSES, HIDDEN_LOSSES, PREDICTION_LOSSES, HiddenProjection,
                                       regression_mse, value_relation_kl)
from hf_plm_ext.training.trainer import SubLossTrainer

STAGES = ("intermediate", "prediction", "both")


@dataclass
class DistillationArguments:
    """What the student learns from the teacher, and how much of each."""

    stage: str = field(default="both", metadata={
        "help": "intermediate (embeddings, hidden states, attentions), prediction (the teacher's outputs) or both "
                "at once; the recipes (`hf-plm-ext distill`) also take stages in order, as intermediate,prediction"})
    layer_map: str = field(default="uniform", metadata={"help": "student layer m <- teacher layer: uniform (m*N/M, "
                                                                "TinyBERT), last, or teacher layers as '2,4,6'"})
    attention_loss: str = field(default="mse", metadata={"help": "mse (pre-softmax scores, TinyBERT), kl "
                                                                 "(probabilities; any head counts) or none"})
    hidden_loss: str = field(default="mse", metadata={"help": "mse (TinyBERT) or cosine (DistilBERT), on the "
                                                              "embeddings and the mapped layers' outputs"})
    shared_projection: bool = field(default=True, metadata={
        "help": "one projection of the student's width to the teacher's for every layer (TinyBERT); false: one "
                "per layer (TextBrewer)"})
    value_relation_heads: int | None = field(default=None, metadata={
        "help": "MiniLM's value-relation loss on the last mapped layer, over this many relation heads"})
    prediction_loss: str | None = field(default=None, metadata={
        "help": "soft_ce (TinyBERT), kl (KL*T^2, DistilBERT) or mse; default: soft_ce, mse for regression"})
    temperature: float = field(default=1.0, metadata={"help": "of the prediction loss (TinyBERT: 1)"})
    embedding_weight: float = 1.0
    hidden_weight: float = 1.0
    attention_weight: float = 1.0
    value_relation_weight: float = 1.0
    prediction_weight: float = 1.0
    hard_label_weight: float = field(default=0.0, metadata={"help": "weight of the gold labels' loss beside the "
                                                                    "teacher's"})
    teacher_dtype: str | None = field(default=None, metadata={"help": "run the teacher in bfloat16 or float16"})

    def __post_init__(self):
        choices = {"attention_loss": (*ATTENTION_LOSSES, "none"), "hidden_loss": tuple(HIDDEN_LOSSES),
                   "prediction_loss": (*PREDICTION_LOSSES, "mse", None), "teacher_dtype": ("bfloat16", "float16", None)}
        stages = self.stage.split(",") if isinstance(self.stage, str) else [self.stage]
        if not stages or any(stage not in STAGES for stage in stages):
            raise ValueError(f"--stage must be one of {list(STAGES)} (or several in order, as "
                             f"'intermediate,prediction'), got {self.stage!r}")
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"--{name} must be one of {[a for a in allowed if a]}, got {getattr(self, name)!r}")
        if self.temperature <= 0:
            raise ValueError(f"--temperature must be > 0, got {self.temperature}")
        for f in fields(self):
            if f.name.endswith("_weight") and getattr(self, f.name) < 0:
                raise ValueError(f"--{f.name} must be >= 0, got {getattr(self, f.name)}")
        if self.value_relation_heads is not None and self.value_relation_heads < 1:
            raise ValueError(f"--value_relation_heads must be >= 1, got {self.value_relation_heads}")

    @property
    def intermediate(self) -> bool:
        return self.stage in ("intermediate", "both")

    @property
    def prediction(self) -> bool:
        return self.stage in ("prediction", "both")


@dataclass
class DistillationOutput(ModelOutput):
    """``loss``: the weighted sum; ``logits``: the student's (``[b, C]``; ``None`` for an encoder); the sub-losses
    (scalars, while training)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    embedding_loss: torch.Tensor | None = None
    hidden_loss: torch.Tensor | None = None
    attention_loss: torch.Tensor | None = None
    value_relation_loss: torch.Tensor | None = None
    prediction_loss: torch.Tensor | None = None
    label_loss: torch.Tensor | None = None


def _is_regression(config) -> bool:
    return config.problem_type == "regression" or (config.problem_type is None and config.num_labels == 1)


@functools.cache
def _accepted_inputs(model_class) -> frozenset | None:
    """The argument names of ``model_class.forward`` (None: it takes ``**kwargs``), read once per class."""
    parameters = inspect.signature(model_class.forward).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return None
    return frozenset(parameters)


class DistillationModel(nn.Module):
    """``student`` learning from ``teacher`` (any transformers models of one vocabulary whose outputs carry
    hidden states; the attention losses read BERT-like attention, see ``features``)."""

    def __init__(self, student, teacher, args: DistillationArguments | None = None):
        super().__init__()
        args = args or DistillationArguments()
        if args.stage not in STAGES:
            raise ValueError(f"a DistillationModel trains one stage at a time ({', '.join(STAGES)}); got "
                             f"{args.stage!r} (run the stages one after another, as `hf-plm-ext distill task` does)")
        student_config, teacher_config = student.config, teacher.config
        if student_config.vocab_size != teacher_config.vocab_size:
            raise ValueError(f"student and teacher must share a vocabulary: the student has {student_config.vocab_size} "
                             f"tokens, the teacher {teacher_config.vocab_size}")
        self.student = student
        self.__dict__["teacher"] = teacher.eval().requires_grad_(False)
        self.args = args
        self.regression = _is_regression(student_config)
        self.prediction_loss = args.prediction_loss or ("mse" if self.regression else "soft_ce")
        if self.regression and self.prediction_loss in PREDICTION_LOSSES:
            raise ValueError(f"a regression student (one output) cannot take the classification loss "
                             f"{self.prediction_loss!r}: use prediction_loss='mse'")
        if (args.prediction or args.hard_label_weight) and student.base_model is student:
            raise ValueError(f"the prediction and label losses need a student with a head; a "
                             f"{type(student).__name__} is an encoder: distil it with stage='intermediate'")
        if args.prediction and student_config.num_labels != teacher_config.num_labels:
            raise ValueError(f"the prediction loss compares the student's {student_config.num_labels} outputs with "
                             f"the teacher's {teacher_config.num_labels}: the teacher must be fine-tuned for the same "
                             f"labels")
        self.weights = active = self._active_weights()
        if not active:
            raise ValueError(f"nothing to learn: every loss of stage {args.stage!r} has weight 0 or is 'none'")
        self.layer_map = layer_map_from(args.layer_map, student_config.num_hidden_layers,
                                        teacher_config.num_hidden_layers)
        # only what a loss uses trains: DDP wants every parameter to get a gradient
        projected = {"embedding_loss", "hidden_loss"} & set(active)
        self.projection = HiddenProjection(student_config.hidden_size, teacher_config.hidden_size,
                                           len(self.layer_map.hidden_pairs) if projected else 0,
                                           args.shared_projection)
        self.reads_attention = bool({"attention_loss", "value_relation_loss"} & set(active))
        if self.reads_attention:
            self.student_attention = AttentionProjections(student)
            self.teacher_attention = AttentionProjections(teacher)
            if args.attention_loss == "mse" and self.student_attention.num_heads != self.teacher_attention.num_heads:
                raise ValueError(f"attention_loss='mse' compares the attention scores head by head: the student has "
                                 f"{self.student_attention.num_heads} heads, the teacher "
                                 f"{self.teacher_attention.num_heads}; use attention_loss='kl' (probabilities "
                                 f"averaged over the heads)")

    def _active_weights(self) -> dict:
        args = self.args
        weights = {"label_loss": args.hard_label_weight}
        if args.intermediate:
            weights.update(embedding_loss=args.embedding_weight, hidden_loss=args.hidden_weight,
                           attention_loss=args.attention_weight * (args.attention_loss != "none"),
                           value_relation_loss=args.value_relation_weight * bool(args.value_relation_heads))
        if args.prediction:
            weights["prediction_loss"] = args.prediction_weight
        return {name: weight for name, weight in weights.items() if weight}

    @property
    def config(self):
        return self.student.config

    def remove_hooks(self):
        """Take the attention-reading hooks off the student and the teacher (when done with this model)."""
        for projections in (getattr(self, "student_attention", None), getattr(self, "teacher_attention", None)):
            if projections is not None:
                projections.remove()

    def activation_checkpointing_enable(self, **kwargs):
        """The student's (the ``Trainer`` calls it for ``activation_checkpointing``)."""
        self.student.activation_checkpointing_enable(**kwargs)

    def _run(self, model, inputs, attention):
        accepted = _accepted_inputs(type(model))
        if accepted is not None:  # DistilBERT takes no token_type_ids
            inputs = {name: value for name, value in inputs.items() if name in accepted}
        if not self.reads_attention:
            return model(**inputs, output_hidden_states=self.args.intermediate, return_dict=True)
        with attention.capture():
            return model(**inputs, output_hidden_states=True, return_dict=True)

    def forward(self, labels=None, return_loss=True, **inputs) -> DistillationOutput:
        """``inputs``: what the student and teacher take (``input_ids`` [b, T], ``attention_mask``, ...);
        ``labels`` [b]: the gold labels, used only with ``hard_label_weight``. The loss needs no labels
        (``return_loss`` tells the ``Trainer`` so, as CLIP's does)."""
        with torch.no_grad():
            teacher = self._run(self.teacher, inputs, getattr(self, "teacher_attention", None))
        student = self._run(self.student, inputs, getattr(self, "student_attention", None))
        losses = {}
        if self.args.intermediate:
            losses.update(self._intermediate_losses(student, teacher, inputs.get("attention_mask")))
        if "prediction_loss" in self.weights:
            losses["prediction_loss"] = self._prediction_loss(student.logits, teacher.logits.float())
        if "label_loss" in self.weights and labels is not None:
            losses["label_loss"] = (regression_mse(student.logits, labels) if self.regression
                                    else F.cross_entropy(student.logits, labels))
        loss = sum(self.weights[name] * value for name, value in losses.items())
        return DistillationOutput(loss=loss, logits=getattr(student, "logits", None),
                                  **(losses if self.training else {}))

    def _intermediate_losses(self, student, teacher, attention_mask) -> dict:
        args, losses = self.args, {}
        hidden_loss = HIDDEN_LOSSES[args.hidden_loss]

        def hidden_match(index):
            s, t = self.layer_map.hidden_pairs[index]
            return hidden_loss(self.projection(student.hidden_states[s], index), teacher.hidden_states[t].float(),
                               attention_mask)

        if "embedding_loss" in self.weights:
            losses["embedding_loss"] = hidden_match(0)
        if "hidden_loss" in self.weights:  # summed over the layers, as TinyBERT
            losses["hidden_loss"] = sum(hidden_match(i) for i in range(1, len(self.layer_map.hidden_pairs)))
        if "attention_loss" in self.weights:
            attention_loss = ATTENTION_LOSSES[args.attention_loss]
            losses["attention_loss"] = sum(
                attention_loss(self.student_attention.scores(s), self.teacher_attention.scores(t).float(),
                               attention_mask) for s, t in self.layer_map.attention_pairs)
        if "value_relation_loss" in self.weights:
            s, t = self.layer_map.attention_pairs[-1]
            losses["value_relation_loss"] = value_relation_kl(
                self.student_attention.values(s), self.teacher_attention.values(t).float(), args.value_relation_heads,
                attention_mask)
        return losses

    def _prediction_loss(self, student_logits, teacher_logits):
        if self.prediction_loss == "mse":
            return F.mse_loss(student_logits.float(), teacher_logits)
        return PREDICTION_LOSSES[self.prediction_loss](student_logits, teacher_logits, self.args.temperature)


class DistillationTrainer(SubLossTrainer):
    """A ``Trainer`` whose ``model`` (a student) learns from ``teacher`` as ``distillation_args`` say.

    ``trainer.model`` is the :class:`DistillationModel`; ``trainer.student`` the student. ``save_model`` (and so
    ``save_final``) writes the student alone; checkpoints keep the projections too, so training resumes.
    """

    def __init__(self, model=None, teacher=None, distillation_args: DistillationArguments | None = None, **kwargs):
        if not isinstance(model, DistillationModel):
            if teacher is None:
                raise ValueError("DistillationTrainer needs a teacher")
            model = DistillationModel(model, teacher, distillation_args)
        super().__init__(model=model, **kwargs)
        self.model_accepts_loss_kwargs = False  # the sub-losses are means already
        if model.student.base_model is model.student:  # an encoder learns from unlabelled text: evaluate without
            self.label_names = []
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(model.args.teacher_dtype)
        model.teacher.to(device=self.args.device, dtype=dtype)

    @property
    def student(self):
        return self.accelerator.unwrap_model(self.model).student

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:  # the student's inputs, not DistillationModel.forward's **inputs
            self._signature_columns = [*inspect.signature(self.student.forward).parameters, "label", "label_ids",
                                       *self.label_names]

    def save_model(self, output_dir=None, _internal_call=False):
        if _internal_call:  # a checkpoint: the student and its projections, to resume from
            return super().save_model(output_dir, _internal_call=True)
        output_dir = output_dir or self.args.output_dir
        if self.args.should_save:
            self.student.save_pretrained(output_dir)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir)
