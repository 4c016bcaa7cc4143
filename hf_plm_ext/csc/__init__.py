"""Chinese spelling correction, an application in one room: training pairs misspelt with real confusion sets
(``data``), the corrector over the spelling-correction pipeline (``corrector``), SIGHAN's scores (``metrics``) and the
fine-tune / evaluate recipe (``recipe``). The model class and its pipeline are the family's that declares them
(``SPELLING_CORRECTION`` in its folder's ``__init__.py``: MacBERT's, ``MacBertForSpellingCorrection``), read through
``hf_plm_ext.registry.spelling_correction``."""

from hf_plm_ext.csc.corrector import SpellingCorrector
from hf_plm_ext.csc.data import (
    ConfusionSet,
    SpellingErrorGenerator,
    build_spelling_pairs,
    read_spelling_pairs,
)
from hf_plm_ext.csc.metrics import csc_scores
from hf_plm_ext.csc.recipe import CSCFinetuneArguments, evaluate_csc, finetune_csc

__all__ = ["SpellingCorrector", "ConfusionSet", "SpellingErrorGenerator", "build_spelling_pairs",
           "read_spelling_pairs", "csc_scores", "CSCFinetuneArguments", "evaluate_csc", "finetune_csc"]
