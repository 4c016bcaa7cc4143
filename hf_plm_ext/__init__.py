"""hf-plm-ext: post-BERT pre-training ideas as first-class Hugging Face citizens.

Importing the package registers every model family with ``AutoConfig`` and the ``AutoModel*`` classes (see
``hf_plm_ext.registry``) and the bottleneck method and the families' default targets with PEFT. The top level
names the public API, as transformers' does: configs and models, collators and example builders, trainers, the
objective table and the steps of ``pretrain`` and ``finetune``. A room (``distill``, ``csc``, ...) is imported on
first use of one of its names, so ``from hf_plm_ext import MacBertConfig`` loads neither.
"""

import importlib
from typing import TYPE_CHECKING

from hf_plm_ext.registry import FAMILIES, AutoModelForSpellingCorrection, family_folders, register_families

register_families()
import hf_plm_ext.adapters  # noqa: E402,F401  (registers the bottleneck method and the families' targets with PEFT)

__version__ = "0.1.0"

# every family's configs and models, as its folder's AUTO_CLASSES (and OTHER_HEADS) name them; loaded already, to
# register them
FAMILY_CLASSES = {cls.__name__: cls for folder in family_folders()
                  for cls in [*folder.AUTO_CLASSES.values(), *getattr(folder, "OTHER_HEADS", ())]}
globals().update(FAMILY_CLASSES)

# the rest of the public API: the module that defines each name, imported when the name is first asked for
IMPORT_STRUCTURE = {
    # adapters (a PEFT method)
    "hf_plm_ext.adapters": ["BottleneckConfig", "BottleneckModel", "BottleneckLayer"],
    # data: collators and example builders
    "hf_plm_ext.data.correction_masking": ["DataCollatorForCorrectionMasking", "add_word_ids", "jieba_spans"],
    "hf_plm_ext.data.replaced_token_detection": ["SpecialTokensMaskCollator", "rtd_metrics"],
    "hf_plm_ext.data.segment_streams": ["StreamSegments", "tokenize_stream"],
    "hf_plm_ext.data.similar_words": ["EmbeddingNeighbours", "SynonymTable", "load_similar_words"],
    "hf_plm_ext.data.sop": ["build_sop_pairs"],
    "hf_plm_ext.data.token_blocks": ["token_blocks"],
    "hf_plm_ext.data.tokenizer_training": ["make_causal", "train_tokenizer"],
    # pre-training
    "hf_plm_ext.training.trainer": ["SubLossTrainer"],
    "hf_plm_ext.training.segment_memory": ["SegmentMemoryTrainer"],
    "hf_plm_ext.training.layerwise_decay": ["LayerwiseLRDecayTrainer"],
    "hf_plm_ext.training.objectives": ["OBJECTIVES", "Objective", "PretrainArguments"],
    "hf_plm_ext.training.pretrain": ["pretrain"],
    "hf_plm_ext.training.cpu_memory": ["retain_freed_memory"],
    # fine-tuning and scoring
    "hf_plm_ext.finetuning": ["FinetuneArguments", "finetune"],
    "hf_plm_ext.eval.language_model": ["evaluate_language_model", "stream_perplexity"],
    # distillation
    "hf_plm_ext.distill": ["DistillationArguments", "DistillationModel", "DistillationTrainer", "student_config",
                           "student_from_teacher_layers"],
    "hf_plm_ext.distill.recipe": ["distill_general", "distill_task"],
    # Chinese spelling correction
    "hf_plm_ext.csc": ["ConfusionSet", "SpellingCorrector", "SpellingErrorGenerator", "build_spelling_pairs",
                       "csc_scores", "evaluate_csc", "finetune_csc", "read_spelling_pairs"],
    # conversion, publishing
    "hf_plm_ext.convert": ["convert_adapterhub", "convert_reformer", "export_as_bert", "export_bert", "export_electra"],
    "hf_plm_ext.hub.cards": ["render_card"],
    "hf_plm_ext.hub.push": ["push_checkpoint"],
}
_MODULE_OF = {name: module for module, names in IMPORT_STRUCTURE.items() for name in names}

__all__ = ["FAMILIES", "register_families", "AutoModelForSpellingCorrection", *FAMILY_CLASSES, *_MODULE_OF]


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from hf_plm_ext.adapters import BottleneckConfig, BottleneckLayer, BottleneckModel
    from hf_plm_ext.convert import convert_adapterhub, convert_reformer, export_as_bert, export_bert, export_electra
    from hf_plm_ext.csc import (
        ConfusionSet,
        SpellingCorrector,
        SpellingErrorGenerator,
        build_spelling_pairs,
        csc_scores,
        evaluate_csc,
        finetune_csc,
        read_spelling_pairs,
    )
    from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking, add_word_ids, jieba_spans
    from hf_plm_ext.data.replaced_token_detection import SpecialTokensMaskCollator, rtd_metrics
    from hf_plm_ext.data.segment_streams import StreamSegments, tokenize_stream
    from hf_plm_ext.data.similar_words import EmbeddingNeighbours, SynonymTable, load_similar_words
    from hf_plm_ext.data.sop import build_sop_pairs
    from hf_plm_ext.data.token_blocks import token_blocks
    from hf_plm_ext.data.tokenizer_training import make_causal, train_tokenizer
    from hf_plm_ext.distill import (
        DistillationArguments,
        DistillationModel,
        DistillationTrainer,
        student_config,
        student_from_teacher_layers,
    )
    from hf_plm_ext.distill.recipe import distill_general, distill_task
    from hf_plm_ext.eval.language_model import evaluate_language_model, stream_perplexity
    from hf_plm_ext.finetuning import FinetuneArguments, finetune
    from hf_plm_ext.hub.cards import render_card
    from hf_plm_ext.hub.push import push_checkpoint
    from hf_plm_ext.modeling.electra_rtd import *  # noqa: F403
    from hf_plm_ext.modeling.k_adapter import *  # noqa: F403
    from hf_plm_ext.modeling.macbert import *  # noqa: F403
    from hf_plm_ext.modeling.rev_lsh import *  # noqa: F403
    from hf_plm_ext.modeling.transfo_xl import *  # noqa: F403
    from hf_plm_ext.training.cpu_memory import retain_freed_memory
    from hf_plm_ext.training.layerwise_decay import LayerwiseLRDecayTrainer
    from hf_plm_ext.training.objectives import OBJECTIVES, Objective, PretrainArguments
    from hf_plm_ext.training.pretrain import pretrain
    from hf_plm_ext.training.segment_memory import SegmentMemoryTrainer
    from hf_plm_ext.training.trainer import SubLossTrainer
