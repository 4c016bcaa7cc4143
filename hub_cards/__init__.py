"""Model-card templates (Jinja, rendered by ``hf_plm_ext.hub.cards``), one per family: ``<model_type>.md``."""
