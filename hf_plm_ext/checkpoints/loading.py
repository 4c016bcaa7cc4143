"""Loading checkpoints with one clear error instead of a deep traceback."""

import functools
import json
import os
from pathlib import Path

import httpx2  # huggingface_hub's HTTP client
from huggingface_hub.errors import StrictDataclassError
from safetensors import SafetensorError
from transformers import AutoConfig, PreTrainedModel
from transformers.utils import logging as transformers_logging

from hf_plm_ext.errors import UserInputError

logger = transformers_logging.get_logger(__name__)


def load_pretrained(auto_class, name_or_path, what, **kwargs):
    """``auto_class.from_pretrained`` that reports a missing or unreadable checkpoint as one ``UserInputError``.

    A local folder is loaded by its resolved path, so that what records it (a PEFT adapter's
    ``base_model_name_or_path``) names it from anywhere; any other name must be a model on the Hub, looked up once
    (one request, no retries) before transformers tries its files.
    """
    path = Path(name_or_path)
    looks_local = path.is_absolute() or str(name_or_path).startswith(".") or path.exists()
    if looks_local and not path.is_dir():
        raise UserInputError(f"{what} directory not found: {name_or_path}")
    is_model = hasattr(auto_class, "_model_mapping") or issubclass(auto_class, PreTrainedModel)
    if path.is_dir():
        name_or_path = str(path.resolve())
        if ((is_model or auto_class is AutoConfig) and (path / "adapter_config.json").is_file()
                and not (path / "config.json").is_file()):
            raise UserInputError(_adapter_not_model(path, what))
    else:
        check_hub_model(str(name_or_path), what)
    try:
        if is_model:
            return _load_model(auto_class, name_or_path, what, **kwargs)
        return auto_class.from_pretrained(name_or_path, **kwargs)
    except SafetensorError as err:
        weights = ", ".join(p.name for p in sorted(path.glob("*.safetensors"))) or "its weights"
        raise UserInputError(f"cannot read the {what} weights in {path} ({weights}): not a valid safetensors file "
                             f"({err})") from None
    except StrictDataclassError as err:  # a config field of the wrong type or out of range
        raise UserInputError(f"{path / 'config.json'}: {' '.join(str(err).split())}") from None
    except RuntimeError as err:
        if "mismatch" not in str(err).lower():
            raise
        raise UserInputError(f"the {what} at {name_or_path} has layers of other sizes than asked for (e.g. a "
                             f"classifier for another label count); pass --ignore_mismatched_sizes to "
                             f"re-initialise them") from None
    except ValueError as err:
        if not str(err).startswith("Unrecognized configuration class"):
            raise _cannot_load(what, name_or_path, err) from None
        raise UserInputError(_missing_head(auto_class, name_or_path, what)) from None
    except (OSError, KeyError) as err:
        raise _cannot_load(what, name_or_path, err) from None


def _adapter_not_model(path: Path, what: str) -> str:
    """A PEFT adapter folder given where a model is read: what it is and how it is used. A bottleneck adapter is
    non-linear: it has no merge, only loading on its base (or ``unload()``, which gives the base back)."""
    try:
        adapter = json.loads((path / "adapter_config.json").read_text())
    except (OSError, ValueError):
        adapter = {}
    base = adapter.get("base_model_name_or_path")
    said = (f"{what} {path} is a PEFT adapter (of {base or 'a base model it does not name'}), not a model: load it "
            f"with peft's AutoPeftModel*.from_pretrained({str(path)!r})")
    if adapter.get("peft_type") == "BOTTLENECK":
        return (f"{said}, which puts it on its base (a bottleneck adapter is non-linear: it cannot be merged into "
                f"the base's weights; unload() gives the base back without it), or pass its base as the model and "
                f"train a new adapter on it (--adapter)")
    return f"{said}, or merge it into its base first (merge_and_unload(), then save_pretrained) and pass that folder"


def _load_model(auto_class, name_or_path, what, **kwargs):
    """``from_pretrained`` with one warning line for each kind of weight that was not simply loaded, in place of
    transformers' load report (a table, printed at every fine-tune for the new head). The model's
    ``newly_initialised_modules`` lists the modules whose weights were initialised here (an adapter must train and
    save them: a BERT-style classifier's pooler, when the checkpoint had none)."""
    modeling_logger = transformers_logging.get_logger("transformers.modeling_utils")
    modeling_logger.addFilter(_without_load_report)  # not a level: transformers' other checks depend on it
    try:
        model, info = auto_class.from_pretrained(name_or_path, output_loading_info=True, **kwargs)
    finally:
        modeling_logger.removeFilter(_without_load_report)
    model.newly_initialised_modules = sorted({key.rsplit(".", 1)[0] for key in info["missing_keys"]} |
                                             {key.rsplit(".", 1)[0] for key, *_ in info["mismatched_keys"]})
    if int(os.environ.get("RANK", "0")) == 0:  # once per run, not once per process under torchrun
        for keys, state in ((info["missing_keys"], "new weights, initialised randomly"),
                            ([key for key, *_ in info["mismatched_keys"]], "weights re-initialised for their new sizes"),
                            (info["unexpected_keys"], "weights of the checkpoint left unused")):
            if keys:
                logger.warning(f"{what} {name_or_path}: {state}: {_module_names(keys)}")
    return model


def _without_load_report(record) -> bool:
    return "LOAD REPORT" not in record.getMessage()


def _module_names(keys, shown=6) -> str:
    """``classifier.weight, classifier.bias`` -> ``classifier``: the modules, not each tensor."""
    modules = sorted({key.rsplit(".", 1)[0] for key in keys})
    more = f" and {len(modules) - shown} more" if len(modules) > shown else ""
    return ", ".join(modules[:shown]) + more


def _cannot_load(what, name_or_path, err) -> UserInputError:
    first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return UserInputError(f"cannot load the {what} from {name_or_path}: {first_line}")


HEADS = ("AutoModel", "AutoModelForMaskedLM", "AutoModelForPreTraining", "AutoModelForCausalLM",
         "AutoModelForSequenceClassification", "AutoModelForTokenClassification", "AutoModelForQuestionAnswering")


def _missing_head(auto_class, name_or_path, what) -> str:
    """Instead of transformers' list of every config class it knows: the classes this checkpoint does load with."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(name_or_path)
    heads = [name for name in HEADS if type(config) in getattr(transformers, name)._model_mapping]
    return (f"the {what} at {name_or_path} is a {config.model_type!r} checkpoint, which has no "
            f"{auto_class.__name__} class; it loads with {', '.join(heads) or 'none of the Auto model classes'}")


@functools.cache
def check_hub_model(name: str, what: str) -> None:
    """A name that is not a local folder must be a model on the Hub; say so at once when it is not, or when the Hub
    cannot be asked (offline, unreachable), instead of transformers' retries and a message about another file."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    not_local = f"{name!r} is not a local folder"
    if constants.HF_HUB_OFFLINE:
        raise UserInputError(f"{not_local}, and HF_HUB_OFFLINE is set, so the Hub is not asked")
    try:
        HfApi().model_info(name, timeout=10)
    except HFValidationError:
        raise UserInputError(f"{not_local}, nor a valid Hub model id") from None
    except RepositoryNotFoundError:
        raise UserInputError(f"{not_local}, nor a model on the Hub at {constants.ENDPOINT} (or it is private: log "
                             f"in with `hf auth login`)") from None
    except (httpx2.TransportError, OSError) as err:
        raise UserInputError(f"{not_local}, and the Hub at {constants.ENDPOINT} could not be reached to look it up "
                             f"({type(err).__name__}: {err})") from None


def check_tokenizer_fits(tokenizer, model, tokenizer_source, model_source=None):
    """A tokenizer whose ids run past the model's embedding table would crash deep inside ``forward``. The sources
    name where each was read (the same folder when ``model_source`` is None)."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        model_has = (f"the model's input embeddings have only {rows} rows" if model_source in (None, tokenizer_source)
                     else f"the model at {model_source} has only {rows} rows of input embeddings")
        raise UserInputError(
            f"the tokenizer at {tokenizer_source} has {len(tokenizer)} tokens but {model_has}: they do not belong "
            f"together (use the model's own tokenizer, or resize the embeddings with model.resize_token_embeddings)"
        )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model")


def check_same_tokenizer(tokenizer, tokenizer_source, model_source):
    """A checkpoint saved with its tokenizer must be trained with that vocabulary: another one of the same size or
    smaller would pass :func:`check_tokenizer_fits` and silently read every embedding row as another token."""
    model_dir, tokenizer_dir = Path(model_source), Path(tokenizer_source)
    if not model_dir.is_dir() or (tokenizer_dir.is_dir() and model_dir.resolve() == tokenizer_dir.resolve()):
        return
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        return
    from transformers import AutoTokenizer

    own = load_pretrained(AutoTokenizer, model_source, "tokenizer of --model").get_vocab()
    given = tokenizer.get_vocab()
    if own != given:
        moved = sorted(token for token in set(own) | set(given) if own.get(token) != given.get(token))
        example = moved[0]
        raise UserInputError(
            f"the tokenizer at {tokenizer_source} has another vocabulary than the one saved with the model at "
            f"{model_source} ({len(given)} vs {len(own)} tokens, {len(moved)} differ, e.g. {example!r}: id "
            f"{given.get(example)} vs {own.get(example)}); leave --tokenizer out to use the model's own")


def check_sequence_length(model, max_seq_length):
    """Longer inputs than the position table would crash deep inside ``forward``."""
    positions = getattr(model.config, "max_position_embeddings", None)
    if positions is not None and 0 < positions < max_seq_length:  # (-1: no limit, as XLNet's)
        raise UserInputError(f"--max_seq_length {max_seq_length} exceeds the model's max_position_embeddings "
                             f"({positions})")
