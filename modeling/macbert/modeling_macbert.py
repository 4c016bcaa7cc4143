"""MacBERT models: transformers' BERT modules under the ``macbert`` model type.

The encoder is BERT's, unchanged, and the submodule is still called ``bert``, so a BERT
checkpoint's weights load into these classes key for key (only new heads start fresh) and a
MacBERT encoder exports back to a plain ``bert`` checkpoint. What MacBERT adds is the
pre-training objective (correction masking and sentence-order prediction), which lives in
collators and heads rather than in the encoder.
"""

from transformers import (
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    BertPreTrainedModel,
)

from .configuration_macbert import MacBertConfig


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


class MacBertForSequenceClassification(MacBertPreTrainedModel, BertForSequenceClassification):
    """Encoder + pooled classifier; ``logits`` are ``[batch, num_labels]`` (``num_labels == 1``:
    regression with MSE)."""

    config_class = MacBertConfig


__all__ = [
    "MacBertForMaskedLM",
    "MacBertForSequenceClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
]
