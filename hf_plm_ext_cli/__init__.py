"""The ``hf-plm-ext`` console script (``python -m hf_plm_ext_cli``, e.g. under ``torchrun``): thin sub-commands that
parse, call ``hf_plm_ext`` and print."""
