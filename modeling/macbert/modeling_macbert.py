"""MacBERT models: transformers' BERT modules under the ``macbert`` model type.

The encoder is BERT's, unchanged, and the submodule is still called ``bert``, so a BERT
checkpoint's weights load into these classes key for key (only new heads start fresh) and a
MacBERT encoder exports back to a plain ``bert`` checkpoint. What MacBERT adds is the
pre-training objective (correction masking and sentence-order prediction), which lives in
collators and heads rather than in the encoder.
"""

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
from transformers.utils import ModelOutput
from transformers.utils.generic import can_return_tuple

from .configuration_macbert import MacBertConfig


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


class MacBertPreTrainedModel(BertPreTrainedModel):
    config_class = MacBertConfig
    # The heads return batch means, so the Trainer must scale them for gradient accumulation.
    accepts_loss_kwargs = False


class MacBertModel(MacBertPreTrainedModel, BertModel):
    """The bare encoder.

    Inputs: ``input_ids`` / ``attention_mask`` / ``token_type_ids`` of shape ``[batch, seq]``.
    Returns ``last_hidden_state`` ``[batch, seq, hidden]`` and ``pooler_output`` ``[batch, hidden]``.
    """

    config_class = MacBertConfig


class MacBertForMaskedLM(MacBertPreTrainedModel, BertForMaskedLM):
    """Encoder + MLM head tied to the input embeddings; ``logits`` are ``[batch, seq, vocab]``,
    ``labels`` use -100 for positions without a target."""

    config_class = MacBertConfig


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
    "MacBertForTokenClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
]
