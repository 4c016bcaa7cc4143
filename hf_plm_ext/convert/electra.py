"""One half of an ELECTRA run (``electra-rtd``) as a stock ``electra`` checkpoint."""

from transformers import AutoModelForPreTraining, AutoTokenizer

from hf_plm_ext.checkpoints.loading import load_pretrained
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_new_output, staged_output


def export_electra(run_dir, output, part="discriminator") -> None:
    """Save the ``discriminator`` or ``generator`` of an ``electra-rtd`` run (with its tokenizer) as a
    stock ``electra`` checkpoint in ``output``."""
    from hf_plm_ext.modeling.electra_rtd import ElectraForRTDPreTraining

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
