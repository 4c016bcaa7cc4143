"""MacBERT models: transformers' BERT modules under the ``macbert`` model type.

The encoder is BERT's, unchanged, and the submodule is still called ``bert``, so a BERT
checkpoint's weights load into these classes key for key (only new heads start fresh) and a
MacBERT encoder exports back to a plain ``bert`` checkpoint. What MacBERT adds is the
pre-training objective (correction masking and sentence-order prediction), which lives in
collators and heads rather than in the encoder.
"""

import functools
import inspect
from dataclasses import dataclass

import torch
from torch import nn
from transformers import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertPreTrainedModel,
)
from transformers.models.bert.modeling_bert import BertEmbeddings, BertOnlyMLMHead
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from .configuration_macbert import ROBERTA_POSITIONS, MacBertConfig
from .pipeline_spelling_correction import custom_pipelines_entry


@dataclass
class MacBertForPreTrainingOutput(ModelOutput):
    """
    loss: ``mlm_loss + sop_loss`` (the parts that have labels); shape ``()``.
    mlm_loss: cross-entropy of the correction-MLM head at labelled positions.
    sop_loss: cross-entropy of the sentence-order head.
    prediction_logits: ``[batch, seq, vocab]``.
    sop_logits: ``[batch, 2]``; class 1 = segments swapped.
    """

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    sop_loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    sop_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class MacBertSpellingCorrectionOutput(ModelOutput):
    """
    loss: ``w * correction_loss + (1 - w) * detection_loss`` with ``w = config.correction_loss_weight``; shape ``()``.
    correction_loss: cross-entropy of the correction head against the correct sentence, over every labelled token.
    detection_loss: sigmoid focal loss of the detection head over the attended tokens.
    correction_logits: ``[batch, seq, vocab]``; the argmax at each position is the corrected token.
    detection_logits: ``[batch, seq]``; ``sigmoid > 0.5`` = the token is judged wrong.
    """

    loss: torch.Tensor | None = None
    correction_loss: torch.Tensor | None = None
    detection_loss: torch.Tensor | None = None
    correction_logits: torch.Tensor | None = None
    detection_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def sigmoid_focal_loss(logits, targets, gamma: float, alpha: float, mask=None) -> torch.Tensor:
    """Mean binary focal loss (Lin et al., 2017) of ``logits`` against 0/1 ``targets``, both ``[...]``, over the
    entries where ``mask`` is true (all if None). The form of pycorrector's ``FocalLoss(activation_type="sigmoid")``,
    ``-alpha * t * (1-p)^gamma * log p - (1-alpha) * (1-t) * p^gamma * log(1-p)``, with log-sigmoid in place of
    its ``log(p + 1e-9)`` (the same value where that is finite, no underflow where a logit is large)."""
    targets = targets.to(logits.dtype)
    probability = torch.sigmoid(logits)
    log_p, log_not_p = nn.functional.logsigmoid(logits), nn.functional.logsigmoid(-logits)
    loss = -(alpha * targets * (1 - probability) ** gamma * log_p
             + (1 - alpha) * (1 - targets) * probability ** gamma * log_not_p)
    return loss[mask.bool()].mean() if mask is not None else loss.mean()


@functools.cache
def _forward_parameters(model_class) -> frozenset:
    return frozenset(inspect.signature(model_class.forward).parameters) - {"self", "kwargs"}


def refuse_unknown_keywords(model, args, kwargs):
    """A forward pre-hook: a keyword the model does not honour is an error, not silently ignored (transformers'
    heads take ``**kwargs`` and pass them down, where an unknown one vanishes)."""
    unknown = sorted(set(kwargs) - _forward_parameters(type(model)) - set(model.passed_on_keywords))
    if unknown:
        raise TypeError(f"{type(model).__name__}.forward() got unexpected arguments {unknown}")


class RobertaPositionEmbeddings(BertEmbeddings):
    """BERT's embeddings (the same weights, names and initialisation) with RoBERTa's position ids: counted from
    ``pad_token_id + 1`` over the non-pad tokens, pads at ``pad_token_id``, as ``RobertaEmbeddings`` counts them, so
    that a RoBERTa checkpoint's position table is read at the rows it was trained at. Inputs and output as
    ``BertEmbeddings``: ids ``[batch, seq]`` (or embeddings ``[batch, seq, hidden]``) -> ``[batch, seq, hidden]``."""

    def __init__(self, config):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.position_embeddings.padding_idx = config.pad_token_id  # as RoBERTa's: the pads' row takes no gradient

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, cache_length=0):
        if position_ids is None:
            position_ids = (RobertaEmbeddings.create_position_ids_from_input_ids(input_ids, self.padding_idx,
                                                                                 cache_length)
                            if input_ids is not None else
                            RobertaEmbeddings.create_position_ids_from_inputs_embeds(inputs_embeds, self.padding_idx))
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, cache_length)


class MacBertPreTrainedModel(BertPreTrainedModel):
    config_class = MacBertConfig
    # The heads return batch means, so the Trainer must scale them for gradient accumulation.
    accepts_loss_kwargs = False
    # what the heads' **kwargs pass on to BERT, which honours them (a cache: PEFT's prefix tuning)
    passed_on_keywords = ("output_attentions", "output_hidden_states", "return_dict", "past_key_values", "cache",
                          "use_cache")

    def post_init(self):
        if self.config.stock_model_type in ROBERTA_POSITIONS:  # before the weights are initialised
            encoder = getattr(self, "bert", self)
            encoder.embeddings = RobertaPositionEmbeddings(self.config)
        super().post_init()
        self.register_forward_pre_hook(refuse_unknown_keywords, with_kwargs=True)


class MacBertModel(MacBertPreTrainedModel, BertModel):
    """The bare encoder.

    Inputs: ``input_ids`` / ``attention_mask`` / ``token_type_ids`` of shape ``[batch, seq]``.
    Returns ``last_hidden_state`` ``[batch, seq, hidden]`` and ``pooler_output`` ``[batch, hidden]``.
    """

    config_class = MacBertConfig


class MacBertForMaskedLM(MacBertPreTrainedModel, BertForMaskedLM):
    """Encoder + MLM head tied to the input embeddings; ``logits`` are ``[batch, seq, vocab]``,
    ``labels`` use -100 for positions without a target. From a spelling-correction checkpoint it loads the
    correction head (its detection head is left out without a word)."""

    config_class = MacBertConfig
    _keys_to_ignore_on_load_unexpected = [r"^detection\."]


class MacBertForPreTraining(MacBertPreTrainedModel, BertForPreTraining):
    """Encoder + MacBERT's pre-training heads: the correction-MLM head (tied to the input embeddings,
    targets = the original tokens at corrupted positions) and the sentence-order head on the pooled
    output. The heads are BERT's pre-training heads (``cls.predictions``, ``cls.seq_relationship``),
    so BERT pre-training checkpoints load into them; the NSP weights become the SOP start."""

    config_class = MacBertConfig

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, sentence_order_label=None, **kwargs) -> MacBertForPreTrainingOutput:
        r"""
        labels (``[batch, seq]``): original token ids at corrupted positions, -100 elsewhere.
        sentence_order_label (``[batch]``): 0 = A then B as in the document, 1 = swapped.
        """
        outputs = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, return_dict=True, **kwargs)
        prediction_logits, sop_logits = self.cls(outputs.last_hidden_state, outputs.pooler_output)
        mlm_loss = sop_loss = None
        if labels is not None:
            mlm_loss = nn.functional.cross_entropy(prediction_logits.view(-1, self.config.vocab_size), labels.view(-1))
        if sentence_order_label is not None:
            sop_loss = nn.functional.cross_entropy(sop_logits.view(-1, 2), sentence_order_label.view(-1))
        parts = [part for part in (mlm_loss, sop_loss) if part is not None]
        return MacBertForPreTrainingOutput(
            loss=sum(parts) if parts else None, mlm_loss=mlm_loss, sop_loss=sop_loss,
            prediction_logits=prediction_logits, sop_logits=sop_logits,
            hidden_states=outputs.hidden_states, attentions=outputs.attentions,
        )


class MacBertForSpellingCorrection(MacBertPreTrainedModel, BertForMaskedLM):
    """MacBERT4CSC (pycorrector's design): the encoder, BERT's masked-LM head as the correction head (tied to the input
    embeddings; it predicts the correct character at every position) and a per-token detection head
    (``detection``: hidden -> 1) trained with a focal loss. The detection does not gate the correction's input (unlike
    Soft-Masked BERT): it is a second task that sharpens the encoder, and its probability is reported.

    Weight names are ``BertForMaskedLM``'s plus ``detection.*``: a BERT / MacBERT checkpoint loads the encoder and the
    correction head, and this model's checkpoint loads into ``BertForMaskedLM`` (the correction alone).

    Inputs: the (possibly misspelt) sentence as ``input_ids`` ``[batch, seq]`` (+ masks); ``labels`` ``[batch, seq]``:
    the correct sentence's ids, same length, -100 at padding; ``detection_labels`` ``[batch, seq]`` (1 = wrong),
    derived from ``labels != input_ids`` when not given.
    """

    config_class = MacBertConfig

    def __init__(self, config: MacBertConfig):
        MacBertPreTrainedModel.__init__(self, config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.detection = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """With the spelling-correction pipeline named in ``config.custom_pipelines`` (its code,
        ``pipeline_spelling_correction.py``, is copied with the family's), so that ``pipeline(model=DIR,
        trust_remote_code=True)`` corrects text where hf-plm-ext is not installed."""
        self.config.custom_pipelines = {**(getattr(self.config, "custom_pipelines", None) or {}),
                                        **custom_pipelines_entry()}
        return super().save_pretrained(save_directory, *args, **kwargs)

    @can_return_tuple
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, detection_labels=None, **kwargs) -> MacBertSpellingCorrectionOutput:
        outputs = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, return_dict=True, **kwargs)
        correction_logits = self.cls(outputs.last_hidden_state)
        detection_logits = self.detection(outputs.last_hidden_state).squeeze(-1)
        loss = correction_loss = detection_loss = None
        if labels is not None:
            correction_loss = nn.functional.cross_entropy(correction_logits.view(-1, self.config.vocab_size),
                                                          labels.view(-1))
            if detection_labels is None:
                if input_ids is None:
                    raise ValueError("MacBertForSpellingCorrection: pass detection_labels with inputs_embeds "
                                     "(they are derived from input_ids != labels otherwise)")
                detection_labels = (labels != input_ids) & (labels != -100)
            attended = labels != -100
            if attention_mask is not None:
                attended = attended & attention_mask.bool()
            detection_loss = sigmoid_focal_loss(detection_logits, detection_labels, self.config.detection_focal_gamma,
                                                self.config.detection_focal_alpha, attended)
            weight = self.config.correction_loss_weight
            loss = weight * correction_loss + (1 - weight) * detection_loss
        return MacBertSpellingCorrectionOutput(
            loss=loss, correction_loss=correction_loss, detection_loss=detection_loss,
            correction_logits=correction_logits, detection_logits=detection_logits,
            hidden_states=outputs.hidden_states, attentions=outputs.attentions,
        )


class MacBertForSequenceClassification(MacBertPreTrainedModel, BertForSequenceClassification):
    """Encoder + pooled classifier; ``logits`` are ``[batch, num_labels]`` (``num_labels == 1``:
    regression with MSE)."""

    config_class = MacBertConfig



class MacBertForTokenClassification(MacBertPreTrainedModel, BertForTokenClassification):
    """Encoder + per-token classifier; ``logits`` are ``[batch, seq, num_labels]``."""

    config_class = MacBertConfig


class MacBertForQuestionAnswering(MacBertPreTrainedModel, BertForQuestionAnswering):
    """Encoder + span head; ``start_logits`` and ``end_logits`` are ``[batch, seq]``."""

    config_class = MacBertConfig


__all__ = [
    "MacBertForMaskedLM",
    "MacBertForPreTraining",
    "MacBertForPreTrainingOutput",
    "MacBertForQuestionAnswering",
    "MacBertForSequenceClassification",
    "MacBertForSpellingCorrection",
    "MacBertForTokenClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
    "MacBertSpellingCorrectionOutput",
    "sigmoid_focal_loss",
]
