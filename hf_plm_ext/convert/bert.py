"""BERT-shaped stock checkpoints in and out of the ``macbert`` family.

MacBERT's modules are BERT's, so a ``bert`` checkpoint loads key for key; a RoBERTa-type one (``roberta``,
``xlm-roberta``, ``camembert``: the same layers, positions counted from the padding index, one token type) loads
with its names mapped (``roberta.`` -> ``bert.``, ``lm_head`` -> ``cls.predictions``) and ``stock_model_type``
recording where it came from. ``export_bert`` writes a run back as that stock type, loadable without this package.
"""

import dataclasses

from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer, BertConfig
from transformers import BertForMaskedLM, BertForPreTraining, BertModel
from transformers.models.bert.modeling_bert import BertPooler

from hf_plm_ext.checkpoints.loading import load_pretrained
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_new_output, staged_output
from hf_plm_ext.modeling.macbert.configuration_macbert import STOCK_MODEL_TYPES, MacBertConfig

# RoBERTa's weight names and BERT's, prefix for prefix (the layers between are named alike)
ROBERTA_TO_BERT = (("roberta.", "bert."),
                   ("lm_head.dense.", "cls.predictions.transform.dense."),
                   ("lm_head.layer_norm.", "cls.predictions.transform.LayerNorm."),
                   ("lm_head.decoder.", "cls.predictions.decoder."),
                   ("lm_head.bias", "cls.predictions.bias"))
# BERT-shaped stock types the family cannot carry, and why (`pretrain mlm` trains them as they are)
NOT_CARRIED = {
    "albert": "its layers share one set of weights and its embeddings are factorised",
    "distilbert": "it has no token types or pooler, and other weight names",
    "electra": "its generator and discriminator train together: `pretrain electra --generator G --discriminator D`",
    "deberta": "its attention is disentangled (relative positions)",
    "deberta-v2": "its attention is disentangled (relative positions)",
    "ernie": "it adds task-type embeddings",
    "megatron-bert": "its layers normalise before attention (pre-LayerNorm)",
    "mpnet": "its attention adds a relative position bias",
    "roformer": "its positions are rotary",
}
FAMILY_ONLY = ("model_type", "auto_map", "architectures", "transformers_version", "custom_pipelines", "_name_or_path")


def bert_fields(config) -> dict:
    """The fields of a BERT-like config (BERT's, MacBERT's, RoBERTa's) that carry over to another BERT-like family:
    all but what names the family and its code, and MacBERT's own."""
    macbert_only = ({f.name for f in dataclasses.fields(MacBertConfig)} -
                    {f.name for f in dataclasses.fields(BertConfig)})
    return {k: v for k, v in config.to_dict().items() if k not in FAMILY_ONLY and k not in macbert_only}


def check_carried(config, where: str, command: str) -> None:
    """A stock ``config`` the family cannot carry gets one line: why, and the types it can."""
    if config.model_type in STOCK_MODEL_TYPES:
        if config.model_type != "bert" and config.hidden_act != "gelu":
            raise UserInputError(f"--model {where}: a {config.model_type!r} checkpoint with hidden_act "
                                 f"{config.hidden_act!r}; RoBERTa's masked-LM head applies 'gelu' whatever the "
                                 f"encoder's activation, BERT's applies the encoder's, so only 'gelu' carries over")
        return
    why = f" ({NOT_CARRIED[config.model_type]})" if config.model_type in NOT_CARRIED else ""
    raise UserInputError(f"--model {where} is a {config.model_type!r} checkpoint{why}; `{command}` continues "
                         f"'macbert' runs and stock {', '.join(repr(t) for t in STOCK_MODEL_TYPES)} checkpoints")


def macbert_from_stock(model_class, where: str, config):
    """``model_class`` (a MacBERT head) with the weights of the stock checkpoint at ``where`` (``config``, of a type
    :func:`check_carried` passed): every weight of the checkpoint is read; the heads it lacks start fresh, each named
    in one line (BERT's NSP head becomes the SOP head's start)."""
    macbert_config = MacBertConfig(**bert_fields(config), stock_model_type=config.model_type)
    key_mapping = None
    if config.model_type != "bert":
        key_mapping = {"^" + stock.replace(".", r"\."): ours for stock, ours in ROBERTA_TO_BERT}
    model = load_pretrained(model_class, where, "model", config=macbert_config, key_mapping=key_mapping)
    # transformers reverses a load's renaming when it saves; the run is a 'macbert' checkpoint, saved under its names
    model._weight_conversions = None
    return model


def stock_state(model) -> dict:
    """A MacBERT model's weights under the names of its ``stock_model_type`` (a RoBERTa type's has no name for the
    sentence-order head: it is left out)."""
    state = model.state_dict()
    if model.config.stock_model_type == "bert":
        return state
    renamed = {}
    for key, tensor in state.items():
        for stock, ours in ROBERTA_TO_BERT:
            if key.startswith(ours):
                renamed[stock + key.removeprefix(ours)] = tensor
                break
    return renamed


def as_stock(model):
    """A MacBERT pre-training or masked-LM model as the stock model of its ``stock_model_type``, weight for weight:
    ``BertForPreTraining`` (the SOP head in NSP's place) or ``BertForMaskedLM``; for a RoBERTa type its
    ``...ForMaskedLM`` with the pooler kept (as ``roberta-base`` is laid out). Returns the model and what had no
    place in it."""
    config = model.config
    stock_config = AutoConfig.for_model(config.stock_model_type, **bert_fields(config))
    left_out = []
    if config.stock_model_type == "bert":
        stock = (BertForPreTraining if isinstance(model, BertForPreTraining) else BertForMaskedLM)(stock_config)
    else:
        stock = AutoModelForMaskedLM.from_config(stock_config)
        if model.bert.pooler is not None:
            stock.roberta.pooler = BertPooler(stock_config)
        if hasattr(model.cls, "seq_relationship"):
            left_out.append("the sentence-order head (cls.seq_relationship: a RoBERTa checkpoint has no place for it)")
    stock.load_state_dict(stock_state(model), strict=True)
    return stock, left_out


def export_bert(run_dir, output) -> list[str]:
    """Write a ``pretrain macbert`` / ``pretrain mlm`` run (with its tokenizer) as the stock type it started from
    (``bert`` for a fresh one), without ``auto_map``: it loads with transformers alone. Returns what was left out."""
    check_new_output(output)
    config = load_pretrained(AutoConfig, run_dir, "run config")
    architecture = (config.architectures or ["?"])[0]
    if config.model_type == "macbert":
        heads = {"MacBertForPreTraining": AutoModelForPreTraining, "MacBertForMaskedLM": AutoModelForMaskedLM}
        if architecture not in heads:
            raise UserInputError(f"{run_dir} holds a {architecture}; `export bert` writes the runs of `pretrain "
                                 f"macbert` (MacBertForPreTraining) and `pretrain mlm` (MacBertForMaskedLM)")
        stock, left_out = as_stock(load_pretrained(heads[architecture], run_dir, "model"))
    elif config.model_type in STOCK_MODEL_TYPES:  # `pretrain mlm` of a stock checkpoint trains it as it is
        stock, left_out = load_pretrained(AutoModelForMaskedLM, run_dir, "model"), []
    else:
        raise UserInputError(f"{run_dir} is a {config.model_type!r} run; `export bert` writes 'macbert' runs (and "
                             f"`pretrain mlm` runs of stock {', '.join(repr(t) for t in STOCK_MODEL_TYPES)} "
                             f"checkpoints) as their stock type"
                             + ("; for ELECTRA: `hf-plm-ext export electra`" if "electra" in config.model_type
                                else ""))
    tokenizer = load_pretrained(AutoTokenizer, run_dir, "tokenizer")
    with staged_output(output) as staging:
        stock.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
    return left_out


def export_as_bert(model, output, tokenizer=None) -> None:
    """Save ``model``'s encoder (``model.bert``, or the model itself) as ``model_type: bert`` in ``output``."""
    encoder = getattr(model, "bert", model)
    if getattr(encoder.config, "stock_model_type", "bert") != "bert":
        raise UserInputError(f"this encoder follows {encoder.config.stock_model_type!r}'s layout (its positions); "
                             f"export it with export_bert (`hf-plm-ext export bert`)")
    bert = BertModel(BertConfig(**bert_fields(encoder.config)), add_pooling_layer=encoder.pooler is not None)
    bert.load_state_dict(encoder.state_dict())
    with staged_output(output) as staging:
        bert.save_pretrained(str(staging))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(staging))
