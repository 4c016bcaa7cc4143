"""A family's BERT-compatible encoder (MacBERT's) as a stock ``bert`` checkpoint."""

from transformers import BertConfig, BertModel

from hf_plm_ext.files import staged_output


def bert_fields(config) -> dict:
    """The fields of a BERT-like config (BERT's, MacBERT's) that carry over to another BERT-like family: all but
    what names the family and its code."""
    return {k: v for k, v in config.to_dict().items()
            if k not in ("model_type", "auto_map", "architectures", "transformers_version")}


def export_as_bert(model, output, tokenizer=None) -> None:
    """Save ``model``'s encoder (``model.bert``, or the model itself) as ``model_type: bert`` in ``output``."""
    encoder = getattr(model, "bert", model)
    bert = BertModel(BertConfig(**bert_fields(encoder.config)), add_pooling_layer=encoder.pooler is not None)
    bert.load_state_dict(encoder.state_dict())
    with staged_output(output) as staging:
        bert.save_pretrained(str(staging))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))
