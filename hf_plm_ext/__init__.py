"""hf-plm-ext: post-BERT pre-training ideas as first-class Hugging Face citizens.

Importing the package registers every model family with ``AutoConfig`` and the ``AutoModel*``
classes (see ``hf_plm_ext.registry``). The top level holds the public API, as transformers' does:
configs and models, collators and example builders, trainers, the objective table and the steps of
``pretrain`` and ``finetune``.
"""

from hf_plm_ext.registry import FAMILIES, AutoModelForSpellingCorrection, family_folders, register_families

register_families()

# every family's configs and models, as its folder's AUTO_CLASSES (and OTHER_HEADS) name them
FAMILY_CLASSES = [cls for folder in family_folders()
                  for cls in [*folder.AUTO_CLASSES.values(), *getattr(folder, "OTHER_HEADS", ())]]
globals().update({cls.__name__: cls for cls in FAMILY_CLASSES})

from hf_plm_ext.adapters import BottleneckConfig, BottleneckLayer, BottleneckModel  # noqa: E402  (registers with PEFT)
from hf_plm_ext.convert import convert_adapterhub, convert_reformer, export_as_bert, export_electra  # noqa: E402
from hf_plm_ext.csc import (  # noqa: E402
    ConfusionSet,
    SpellingCorrector,
    SpellingErrorGenerator,
    build_spelling_pairs,
    csc_scores,
    evaluate_csc,
    finetune_csc,
    read_spelling_pairs,
)
from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking, add_word_ids, jieba_spans  # noqa: E402
from hf_plm_ext.data.replaced_token_detection import SpecialTokensMaskCollator, rtd_metrics  # noqa: E402
from hf_plm_ext.data.segment_streams import StreamSegments, tokenize_stream  # noqa: E402
from hf_plm_ext.data.similar_words import EmbeddingNeighbours, SynonymTable, load_similar_words  # noqa: E402
from hf_plm_ext.data.sop import build_sop_pairs  # noqa: E402
from hf_plm_ext.data.token_blocks import token_blocks  # noqa: E402
from hf_plm_ext.data.tokenizer_training import make_causal, train_tokenizer  # noqa: E402
from hf_plm_ext.distill import (  # noqa: E402
    DistillationArguments,
    DistillationModel,
    DistillationTrainer,
    student_config,
    student_from_teacher_layers,
)
from hf_plm_ext.distill.recipe import distill_general, distill_task  # noqa: E402
from hf_plm_ext.eval.language_model import evaluate_language_model, stream_perplexity  # noqa: E402
from hf_plm_ext.eval.runner import FinetuneArguments, finetune  # noqa: E402
from hf_plm_ext.hub.cards import render_card  # noqa: E402
from hf_plm_ext.hub.push import push_checkpoint  # noqa: E402
from hf_plm_ext.training.layerwise_decay import LayerwiseLRDecayTrainer  # noqa: E402
from hf_plm_ext.training.objectives import OBJECTIVES, Objective, PretrainArguments  # noqa: E402
from hf_plm_ext.training.pretrain import pretrain  # noqa: E402
from hf_plm_ext.training.segment_memory import SegmentMemoryTrainer  # noqa: E402
from hf_plm_ext.training.trainer import SubLossTrainer  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    # model families
    "FAMILIES", "register_families",
    "AutoModelForSpellingCorrection", *(cls.__name__ for cls in FAMILY_CLASSES),
    # adapters (a PEFT method)
    "BottleneckConfig", "BottleneckModel", "BottleneckLayer",
    # data: collators and example builders
    "DataCollatorForCorrectionMasking", "SpecialTokensMaskCollator", "add_word_ids", "jieba_spans",
    "build_sop_pairs", "token_blocks", "StreamSegments", "tokenize_stream", "load_similar_words", "SynonymTable",
    "EmbeddingNeighbours", "train_tokenizer", "make_causal", "ConfusionSet", "SpellingErrorGenerator",
    "build_spelling_pairs", "read_spelling_pairs",
    # training
    "SubLossTrainer", "SegmentMemoryTrainer", "LayerwiseLRDecayTrainer", "OBJECTIVES", "Objective",
    "PretrainArguments", "pretrain",
    # distillation
    "DistillationArguments", "DistillationModel", "DistillationTrainer", "student_config",
    "student_from_teacher_layers", "distill_task", "distill_general",
    # evaluation, conversion, publishing
    "FinetuneArguments", "finetune", "finetune_csc", "evaluate_csc", "csc_scores", "SpellingCorrector",
    "rtd_metrics", "stream_perplexity", "evaluate_language_model",
    "export_as_bert", "export_electra", "convert_reformer", "convert_adapterhub", "render_card", "push_checkpoint",
]
