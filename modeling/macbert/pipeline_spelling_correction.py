"""Chinese spelling correction as a transformers pipeline: ``pipeline("spelling-correction", model=DIR)`` after
``import hf_plm_ext``, or ``pipeline(model=DIR, trust_remote_code=True)`` anywhere (a spelling-correction checkpoint
carries this file and names it in ``config.custom_pipelines``).

Each text is tokenised into windows of ``max_length`` tokens (a long text goes through in several); the model's
correction head (MacBERT4CSC's, or any masked LM's) gives the arg-max token at each position, and a Chinese character
the tokenizer read as itself (one token, not ``[UNK]``) takes that choice when it is one Chinese character too.
Everything else (Latin, digits, punctuation, word pieces) comes back as it came, so the output has the input's
length: ``{"source": text, "target": corrected, "errors": [(position, wrong, right), ...]}``.
"""

from transformers.pipelines.base import ChunkPipeline

# the task name when hf-plm-ext registers the pipeline, and the one a checkpoint's config.custom_pipelines holds
# (transformers takes a task in custom_pipelines for remote code, which needs trust_remote_code; the names differ so
# that the registered one needs none)
TASK = "spelling-correction"
REMOTE_TASK = "chinese-spelling-correction"


def is_chinese_character(char: str) -> bool:
    """CJK Unified Ideographs (the characters the confusion sets and SIGHAN cover)."""
    return "\u4e00" <= char <= "\u9fff"


def custom_pipelines_entry() -> dict:
    """What a spelling-correction checkpoint's ``config.custom_pipelines`` holds: this file's pipeline, on the model
    ``AutoModelForMaskedLM`` loads (the correction head is a masked LM's)."""
    return {REMOTE_TASK: {"impl": f"{__name__.rsplit('.', 1)[-1]}.SpellingCorrectionPipeline",
                          "pt": ["AutoModelForMaskedLM"], "type": "text"}}


class SpellingCorrectionPipeline(ChunkPipeline):
    """``pipe(text or texts, max_length=None, batch_size=...)``: one ``{"source", "target", "errors"}`` per text.

    ``max_length``: tokens per window (default: the tokenizer's and the model's limit, the smaller)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        vocabulary = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        self._vocabulary = vocabulary
        self._is_chinese_token = [len(token) == 1 and is_chinese_character(token) for token in vocabulary]

    def _sanitize_parameters(self, max_length=None, **kwargs):
        if max_length is not None and max_length < 3:
            raise ValueError(f"max_length must be at least 3 ([CLS], one character, [SEP]), got {max_length}")
        return {"max_length": max_length}, {}, {}

    def _window_length(self, max_length):
        limits = [limit for limit in (max_length, getattr(self.model.config, "max_position_embeddings", None),
                                      self.tokenizer.model_max_length) if limit is not None and limit > 0]
        return min(limits)

    def preprocess(self, text, max_length=None):
        if not isinstance(text, str):
            raise ValueError(f"spelling correction takes text (a string or a list of strings), got {type(text)}")
        encoded = self.tokenizer(text, truncation=True, max_length=self._window_length(max_length),
                                 return_overflowing_tokens=True, return_offsets_mapping=True, padding=True,
                                 return_tensors="pt")
        encoded.pop("overflow_to_sample_mapping", None)
        offsets = encoded.pop("offset_mapping")
        windows = len(encoded["input_ids"])
        for window in range(windows):
            yield {"text": text, "is_last": window == windows - 1, "offset_mapping": offsets[window:window + 1],
                   **{name: values[window:window + 1] for name, values in encoded.items()}}

    def _forward(self, model_inputs):
        passed_through = {name: model_inputs.pop(name) for name in ("text", "is_last", "offset_mapping")}
        outputs = self.model(**model_inputs)
        logits = outputs["correction_logits"] if "correction_logits" in outputs else outputs["logits"]
        # MacBERT4CSC's decoding: the arg-max token at each position
        return {"predicted_ids": logits.argmax(-1), "input_ids": model_inputs["input_ids"], **passed_through}

    def postprocess(self, all_outputs):
        text = all_outputs[0]["text"]
        text = text[0] if isinstance(text, list) else text
        chars = list(text)
        for window in all_outputs:
            for (start, end), read, chosen in zip(window["offset_mapping"][0].tolist(), window["input_ids"][0].tolist(),
                                                  window["predicted_ids"][0].tolist()):
                if end - start == 1 and is_chinese_character(text[start]) and self._is_chinese_token[read] \
                        and self._is_chinese_token[chosen]:
                    chars[start] = self._vocabulary[chosen]
        return {"source": text, "target": "".join(chars),
                "errors": [(i, a, b) for i, (a, b) in enumerate(zip(text, chars)) if a != b]}


__all__ = ["SpellingCorrectionPipeline", "is_chinese_character", "TASK", "REMOTE_TASK", "custom_pipelines_entry"]
