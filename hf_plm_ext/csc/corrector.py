"""Correcting Chinese text with a spelling-correction checkpoint: its transformers pipeline (the family's
``SPELLING_CORRECTION`` declares it: ``SpellingCorrectionPipeline``, in the macbert family's folder so that it travels
with the checkpoint) with a progress bar and this package's errors."""

from tqdm.auto import tqdm
from transformers import AutoConfig, AutoTokenizer

from hf_plm_ext.checkpoints.loading import load_pretrained
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.registry import spelling_correction


class SpellingCorrector:
    """Corrects Chinese text with a spelling-correction model: its pipeline (``SpellingCorrectionPipeline``, what
    ``pipeline("spelling-correction", model=DIR)`` gives) with a progress bar and this package's errors::

        corrector = SpellingCorrector.from_pretrained("path/to/model")
        corrector("我跟我朋唷打算去法国玩儿。")
        # {"source": "...朋唷...", "target": "...朋友...", "errors": [(8, "唷", "友")]}

    A list gives a list. Every Chinese character the tokenizer keeps as one token may be replaced by the correction
    head's choice (another single Chinese character); everything else (Latin, digits, punctuation, text past
    ``max_length`` tokens, which goes through in further windows) is returned as it came, so the output always has
    the input's length. Text without Chinese characters comes back unchanged.
    """

    def __init__(self, model, tokenizer, batch_size: int = 32, max_length: int | None = None, device=None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        device = device if device is not None else next(model.parameters()).device
        self.pipeline = spelling_correction()["pipeline"](model=model.eval(), tokenizer=tokenizer, device=device,
                                                          batch_size=batch_size)
        self.max_length = max_length

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> "SpellingCorrector":
        config = load_pretrained(AutoConfig, path, "config")
        architectures = config.architectures or []
        if not any(name.endswith("ForSpellingCorrection") for name in architectures):
            declared = spelling_correction()
            starts = (*declared["starts_from"], declared["head"].config_class.model_type)
            start = (f"`hf-plm-ext finetune csc --model {path} ...`" if config.model_type in starts
                     else f"`hf-plm-ext finetune csc --model BERT_OR_MACBERT ...` (a {config.model_type!r} "
                          f"checkpoint cannot start one)")
            raise UserInputError(f"{path} is not a spelling-correction model (its architecture is "
                                 f"{', '.join(architectures) or 'not recorded'}; it has no detection head): train "
                                 f"one with {start}")
        tokenizer = load_pretrained(AutoTokenizer, path, "tokenizer")
        model = load_pretrained(spelling_correction()["head"], path, "model")
        return cls(model, tokenizer, **kwargs)

    def __call__(self, texts, progress: bool = False):
        if isinstance(texts, str):
            return self.pipeline(texts, max_length=self.max_length)
        texts = list(texts)
        corrected = self.pipeline((text for text in texts), max_length=self.max_length)  # a generator: one at a time
        return list(tqdm(corrected, total=len(texts), desc="correcting", unit="text", disable=not progress))
