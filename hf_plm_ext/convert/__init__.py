"""Checkpoints from elsewhere into this package's families, and this package's checkpoints out as stock ones.

``bert``: a MacBERT encoder as ``bert``; ``electra``: an ``electra-rtd`` run's halves as ``electra``;
``reformer``: transformers' Reformer checkpoints as ``rev-lsh``; ``adapterhub``: AdapterHub bottleneck adapters as
this package's PEFT ones.
"""

from hf_plm_ext.convert.adapterhub import convert_adapterhub
from hf_plm_ext.convert.bert import export_as_bert, export_bert
from hf_plm_ext.convert.electra import export_electra
from hf_plm_ext.convert.reformer import convert_reformer

__all__ = ["export_as_bert", "export_bert", "export_electra", "convert_reformer", "convert_adapterhub"]
