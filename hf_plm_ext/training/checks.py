"""Loading checkpoints with one clear error instead of a deep traceback."""

from pathlib import Path

from huggingface_hub.errors import StrictDataclassError

from hf_plm_ext.errors import UserInputError


def load_pretrained(auto_class, name_or_path, what, **kwargs):
    """``auto_class.from_pretrained`` that reports a missing or unreadable checkpoint as a ``UserInputError``."""
    path = Path(name_or_path)
    looks_local = path.is_absolute() or str(name_or_path).startswith(".") or path.exists()
    if looks_local and not path.is_dir():
        raise UserInputError(f"{what} directory not found: {name_or_path}")
    try:
        return auto_class.from_pretrained(name_or_path, **kwargs)
    except RuntimeError as err:
        if "mismatch" not in str(err).lower():
            raise
        raise UserInputError(f"the {what} at {name_or_path} has layers of other sizes than asked for (e.g. a "
                             f"classifier for another label count); pass --ignore_mismatched_sizes to "
                             f"re-initialise them") from None
    except (OSError, ValueError, KeyError, StrictDataclassError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserInputError(f"cannot load the {what} from {name_or_path}: {first_line}") from None


def check_tokenizer_fits(tokenizer, model, where):
    """A tokenizer whose ids run past the model's embedding table would crash deep inside ``forward``."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise UserInputError(
            f"the tokenizer at {where} has {len(tokenizer)} tokens but the model's input embeddings have only "
            f"{rows} rows: they do not belong together (use the model's own tokenizer, or resize the "
            f"embeddings with model.resize_token_embeddings)"
        )


def check_sequence_length(model, max_seq_length):
    """Longer inputs than the position table would crash deep inside ``forward``."""
    positions = getattr(model.config, "max_position_embeddings", None)
    if positions is not None and max_seq_length > positions:
        raise UserInputError(f"--max_seq_length {max_seq_length} exceeds the model's max_position_embeddings "
                             f"({positions})")
