"""ELECTRA runs (``electra-rtd``) out as stock ``electra`` checkpoints, laid out as Google's releases are: a
generator and a discriminator folder, each with the tokenizer, the shared embeddings in both."""

from transformers import AutoModelForPreTraining, AutoTokenizer

from hf_plm_ext.checkpoints.loading import load_pretrained
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_new_output, staged_output

PARTS = ("pair", "discriminator", "generator")


def export_electra(run_dir, output, part="pair") -> None:
    """Save an ``electra-rtd`` run (with its tokenizer) as stock ``electra`` checkpoints in ``output``: ``pair``
    writes ``output/generator`` and ``output/discriminator``; ``discriminator`` or ``generator`` that half alone."""
    from hf_plm_ext.modeling.electra_rtd import ElectraForRTDPreTraining

    if part not in PARTS:
        raise UserInputError(f"part must be one of {PARTS}, got {part!r}")
    check_new_output(output)
    model = load_pretrained(AutoModelForPreTraining, run_dir, "model")
    if not isinstance(model, ElectraForRTDPreTraining):
        raise UserInputError(f"{run_dir} is a {model.config.model_type!r} checkpoint, not an ELECTRA run "
                             f"(model_type 'electra-rtd')"
                             + ("; `hf-plm-ext export bert` writes it" if model.config.model_type == "macbert"
                                else ""))
    tokenizer = load_pretrained(AutoTokenizer, run_dir, "tokenizer")
    with staged_output(output) as staging:
        for half in (("generator", "discriminator") if part == "pair" else (part,)):
            folder = staging / half if part == "pair" else staging
            getattr(model, f"save_{half}")(str(folder))
            tokenizer.save_pretrained(str(folder))
