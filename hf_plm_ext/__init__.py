"""hf-plm-ext: post-BERT pre-training ideas as first-class Hugging Face citizens.

Importing the package registers every model family with ``AutoConfig`` and the ``AutoModel*``
classes (see ``hf_plm_ext.registry``).
"""

from hf_plm_ext.registry import FAMILIES, register_families

register_families()

from hf_plm_ext.modeling.electra_rtd import ElectraForRTDPreTraining, ElectraRTDConfig  # noqa: E402
from hf_plm_ext.modeling.macbert import (  # noqa: E402
    MacBertConfig,
    MacBertForMaskedLM,
    MacBertForPreTraining,
    MacBertForQuestionAnswering,
    MacBertForSequenceClassification,
    MacBertForTokenClassification,
    MacBertModel,
)
from hf_plm_ext.modeling.transfo_xl import (  # noqa: E402
    TransfoXLConfig,
    TransfoXLForSequenceClassification,
    TransfoXLLMHeadModel,
    TransfoXLModel,
)

__version__ = "0.1.0"

__all__ = [
    "ElectraForRTDPreTraining",
    "ElectraRTDConfig",
    "FAMILIES",
    "MacBertConfig",
    "MacBertForMaskedLM",
    "MacBertForPreTraining",
    "MacBertForQuestionAnswering",
    "MacBertForSequenceClassification",
    "MacBertForTokenClassification",
    "MacBertModel",
    "TransfoXLConfig",
    "TransfoXLForSequenceClassification",
    "TransfoXLLMHeadModel",
    "TransfoXLModel",
    "register_families",
]
