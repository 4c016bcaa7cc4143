"""Model families, one Hub-portable folder each (installed as ``hf_plm_ext.modeling``).

Files in a family folder import only ``torch``, ``transformers`` and their siblings, so that
``save_pretrained`` can copy them next to the weights (see CONTRIBUTING.md).
"""
