"""Save a trained model without pickles: safetensors weights, code, tokenizer, JSON arguments."""

from pathlib import Path


def save_final(trainer, directory) -> None:
    """Like ``Trainer.save_model`` (a PEFT model saves only its adapter) but writes ``training_args.json``
    instead of the pickled ``training_args.bin``."""
    directory = Path(directory)
    model = trainer.accelerator.unwrap_model(trainer.model)
    card = directory / "README.md"
    had_card = card.exists()
    model.save_pretrained(str(directory))
    if card.exists() and not had_card:
        card.unlink()  # PEFT writes a generic card; `hf-plm-ext push` renders one from the run
    if trainer.processing_class is not None:
        trainer.processing_class.save_pretrained(str(directory))
    (directory / "training_args.json").write_text(trainer.args.to_json_string() + "\n")
