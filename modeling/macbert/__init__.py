from .configuration_macbert import MacBertConfig
from .pipeline_spelling_correction import TASK as SPELLING_CORRECTION_TASK
from .pipeline_spelling_correction import SpellingCorrectionPipeline
from .modeling_macbert import (
    MacBertForMaskedLM,
    MacBertForPreTraining,
    MacBertForQuestionAnswering,
    MacBertForSequenceClassification,
    MacBertForSpellingCorrection,
    MacBertForTokenClassification,
    MacBertModel,
    MacBertPreTrainedModel,
    MacBertSpellingCorrectionOutput,
)

__all__ = [
    "MacBertConfig",
    "MacBertForMaskedLM",
    "MacBertForPreTraining",
    "MacBertForQuestionAnswering",
    "MacBertForSequenceClassification",
    "MacBertForSpellingCorrection",
    "MacBertForTokenClassification",
    "MacBertModel",
    "MacBertPreTrainedModel",
    "MacBertSpellingCorrectionOutput",
]

# The family's classes as hf_plm_ext's registry, the README's table and the family tester read them:
# the Auto class each one serves
AUTO_CLASSES = {
    "AutoConfig": MacBertConfig,
    "AutoModel": MacBertModel,
    "AutoModelForMaskedLM": MacBertForMaskedLM,
    "AutoModelForPreTraining": MacBertForPreTraining,
    "AutoModelForSequenceClassification": MacBertForSequenceClassification,
    "AutoModelForTokenClassification": MacBertForTokenClassification,
    "AutoModelForQuestionAnswering": MacBertForQuestionAnswering,
    "AutoModelForSpellingCorrection": MacBertForSpellingCorrection,  # MacBERT4CSC (hf_plm_ext's own Auto class)
}
# PEFT's default targets (hf_plm_ext/adapters/peft_targets.py registers them): its layers are BERT's modules, so
# every method takes PEFT's entry for BERT
PEFT_TARGETS = "bert"
# bottleneck adapters' places (hf_plm_ext/adapters/bottleneck/targets.py reads them): BERT's modules
BOTTLENECK_TARGETS = "bert"
# Chinese spelling correction (hf_plm_ext's registry and csc/ read it; one family declares it): the pipeline task
# and its class (saved beside a checkpoint, so it travels with it), the head, and the model types whose checkpoints
# a head starts from besides its own (their encoder and masked-LM head load key for key)
SPELLING_CORRECTION = dict(task=SPELLING_CORRECTION_TASK, pipeline=SpellingCorrectionPipeline,
                           head=MacBertForSpellingCorrection, starts_from=("bert",))
