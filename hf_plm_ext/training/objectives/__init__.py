"""The objective table: ``hf-plm-ext pretrain NAME``, ``demo --objective NAME`` and the model cards read it.

Adding an objective is one new module here with an :class:`Objective` subclass, plus one line below.
"""

from hf_plm_ext.training.objectives.base import Objective, PretrainArguments
from hf_plm_ext.training.objectives.electra import ElectraArguments, ElectraRTD
from hf_plm_ext.training.objectives.macbert import MacBertArguments, MacBertPretraining
from hf_plm_ext.training.objectives.mlm import MaskedLM, MaskedLMArguments
from hf_plm_ext.training.objectives.rev_lsh import RevLSHArguments, RevLSHPretraining
from hf_plm_ext.training.objectives.transfo_xl import TransfoXLArguments, TransfoXLLanguageModel

OBJECTIVES: dict[str, type[Objective]] = {
    objective.name: objective for objective in (MaskedLM, MacBertPretraining, ElectraRTD, TransfoXLLanguageModel,
                                                RevLSHPretraining)
}


def objective_for(args: PretrainArguments) -> Objective:
    """The objective whose arguments ``args`` are."""
    for objective in OBJECTIVES.values():
        if type(args) is objective.arguments_class:
            return objective(args)
    raise TypeError(f"{type(args).__name__} are not the arguments of any objective in OBJECTIVES")


__all__ = ["OBJECTIVES", "Objective", "PretrainArguments", "objective_for", "MaskedLM", "MaskedLMArguments",
           "MacBertPretraining", "MacBertArguments", "ElectraRTD", "ElectraArguments", "TransfoXLLanguageModel",
           "TransfoXLArguments", "RevLSHPretraining", "RevLSHArguments"]
