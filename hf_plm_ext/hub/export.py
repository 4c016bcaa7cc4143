"""Export checkpoints that stock transformers loads without custom code: a family's BERT-compatible
encoder as `bert`, an ELECTRA run's discriminator or generator as `electra`."""

from transformers import BertConfig, BertModel

from hf_plm_ext.files import check_new_output, staged_output


def export_as_bert(model, output, tokenizer=None) -> None:
    """Save ``model``'s encoder (``model.bert``, or the model itself) as ``model_type: bert`` in ``output``."""
    encoder = getattr(model, "bert", model)
    fields = {k: v for k, v in encoder.config.to_dict().items()
              if k not in ("model_type", "auto_map", "architectures", "transformers_version")}
    bert = BertModel(BertConfig(**fields), add_pooling_layer=encoder.pooler is not None)
    bert.load_state_dict(encoder.state_dict())
    with staged_output(output) as staging:
        bert.save_pretrained(str(staging))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))


def export_electra(run_dir, output, part="discriminator") -> None:
    """Save the ``discriminator`` or ``generator`` of an ``electra-rtd`` run (with its tokenizer) as a
    stock ``electra`` checkpoint in ``output``."""
    from transformers import AutoModelForPreTraining, AutoTokenizer

    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.modeling.electra_rtd import ElectraForRTDPreTraining
    from hf_plm_ext.training.checks import load_pretrained

    if part not in ("discriminator", "generator"):
        raise UserInputError(f"part must be 'discriminator' or 'generator', got {part!r}")
    check_new_output(output)
    model = load_pretrained(AutoModelForPreTraining, run_dir, "model")
    if not isinstance(model, ElectraForRTDPreTraining):
        raise UserInputError(f"{run_dir} is a {model.config.model_type!r} checkpoint, not an ELECTRA run "
                             f"(model_type 'electra-rtd')")
    tokenizer = load_pretrained(AutoTokenizer, run_dir, "tokenizer")
    with staged_output(output) as staging:
        getattr(model, f"save_{part}")(str(staging))
        tokenizer.save_pretrained(str(staging))
