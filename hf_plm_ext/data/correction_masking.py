"""MacBERT's MLM-as-correction masking: whole words, N-grams, similar-word replacement.

Two steps, as transformers does it:

1. :func:`add_word_ids` runs once per example inside ``datasets.map(batched=True)``: it
   tokenises the text and records, for every token, the index of the word it belongs to
   (``-1`` for special tokens). Words come from the fast tokenizer's pre-tokenisation for
   space-delimited text, or from a segmenter (e.g. :func:`jieba_spans`) for Chinese, mapped onto
   tokens through the character offsets.
2. :class:`DataCollatorForCorrectionMasking` picks words anew for every batch (dynamic masking)
   and writes ``input_ids`` and ``labels`` (the original ids at selected positions, -100
   elsewhere).
"""

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from hf_plm_ext.errors import UserInputError

CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def jieba_spans(text):
    """Character spans ``(start, end)`` of the words jieba finds in ``text``."""
    try:
        import jieba
    except ImportError:
        raise UserInputError("Chinese word segmentation needs jieba: pip install 'hf-plm-ext[zh]'") from None
    return [(start, end) for _, start, end in jieba.tokenize(text) if text[start:end].strip()]


def _word_ids_from_spans(offsets, spans):
    """Token -> index of the span that contains the token's first character (-1: none, or a special token)."""
    word_ids, span_index = [], 0
    for start, end in offsets:
        if end <= start:
            word_ids.append(-1)
            continue
        while span_index < len(spans) and spans[span_index][1] <= start:
            span_index += 1
        inside = span_index < len(spans) and spans[span_index][0] <= start
        word_ids.append(span_index if inside else -1)
    return word_ids


def _renumber(word_ids):
    """Consecutive word numbers in order of appearance, so that N-grams are runs of numbers."""
    mapping = {}
    return [-1 if w is None or w < 0 else mapping.setdefault(w, len(mapping)) for w in word_ids]


def add_word_ids(batch, tokenizer, segmenter: Callable | None = None, text_column="text", max_length=512,
                 add_special_tokens=True):
    """``datasets.map(batched=True)`` function: tokenise ``batch[text_column]`` and add ``word_ids``.

    ``segmenter(text) -> [(start, end), ...]`` gives word spans in characters; ``None`` uses the
    tokenizer's own pre-tokenisation (words split on spaces and punctuation).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise UserInputError(f"whole-word masking needs a fast tokenizer (offsets); got {type(tokenizer).__name__}")
    texts = batch[text_column]
    encoded = tokenizer(texts, truncation=True, max_length=max_length, return_offsets_mapping=True,
                        add_special_tokens=add_special_tokens)
    special_ids = set(tokenizer.all_special_ids)  # literal "[SEP]" in the text must not become a word
    word_ids = []
    for i, text in enumerate(texts):
        if segmenter is None:
            ids = encoded.word_ids(i)
        else:
            ids = _word_ids_from_spans(encoded["offset_mapping"][i], segmenter(text))
        word_ids.append(_renumber([-1 if t in special_ids else w for t, w in zip(encoded["input_ids"][i], ids)]))
    encoded.pop("offset_mapping")
    return {**encoded, "word_ids": word_ids}


WORD_START_MARKERS = ("Ġ", "▁")  # byte-level BPE's (GPT-2, RoBERTa), SentencePiece's (XLM-R, CamemBERT)


def word_start_tokens(tokens: list[str]) -> list[int]:
    """The ids of the tokens that start a word, which random words are drawn from: for a vocabulary that marks word
    starts (byte-level BPE's ``Ġ``, SentencePiece's ``▁``: a quarter of its tokens or more), the marked ones; for
    WordPiece, all but the ``##`` continuations."""
    for marker in WORD_START_MARKERS:
        if sum(token.startswith(marker) for token in tokens) * 4 >= len(tokens):
            return [i for i, token in enumerate(tokens) if token.startswith(marker)]
    return [i for i, token in enumerate(tokens) if not token.startswith("##")]


@dataclass
class DataCollatorForCorrectionMasking:
    """Whole-word N-gram masking with MacBERT's correction replacement.

    Per sequence, ``word_mask_prob`` of its **words** (not tokens; at least one) are selected as
    word N-grams, N = 1, 2, 3, 4 with probabilities ``ngram_probs`` (0.4/0.3/0.2/0.1). Each
    selected word — each word of an N-gram on its own — is then, with ``replace_probs``
    (0.8/0.1/0.1):

    * ``mode="correction"``: replaced by a similar word from ``similar_words`` with the same
      number of tokens (none → a random word), replaced by a random word, or kept. ``[MASK]``
      never appears.
    * ``mode="mask"``: replaced by ``[MASK]`` tokens, by a random word, or kept (the ablation).

    A random word is as many random non-special vocabulary tokens as the word has, so labels
    stay aligned. ``labels`` hold the original ids at selected positions and -100 elsewhere.
    Features need ``input_ids`` and ``word_ids`` (from :func:`add_word_ids`); a feature's ``mask_seed`` (a token
    store's examples carry one) draws that example's masks alone, from it. Otherwise ``seed`` makes the
    sequence of masks reproducible; masks differ from batch to batch (dynamic masking). In
    DataLoader workers each worker draws its own stream, seeded from ``seed`` and the worker's
    torch seed (so reproducible under ``torch.manual_seed``, as the Trainer sets it).
    """

    tokenizer: object
    similar_words: Callable[[str], list] | None = None
    mode: str = "correction"
    word_mask_prob: float = 0.15
    ngram_probs: tuple = (0.4, 0.3, 0.2, 0.1)
    replace_probs: tuple = (0.8, 0.1, 0.1)
    seed: int | None = None
    pad_to_multiple_of: int | None = None
    _candidates: dict = field(default_factory=dict, init=False, repr=False)  # word's token ids -> candidates' ids
    _tokenised: dict = field(default_factory=dict, init=False, repr=False)  # candidate string -> token ids

    def __post_init__(self):
        if self.mode not in ("correction", "mask"):
            raise ValueError(f"mode must be 'correction' or 'mask', got {self.mode!r}")
        if self.mode == "correction" and self.similar_words is None:
            raise ValueError("mode='correction' needs a similar_words source")
        if not 0.0 < self.word_mask_prob <= 1.0:
            raise ValueError(f"word_mask_prob must be in (0, 1], got {self.word_mask_prob}")
        for name in ("ngram_probs", "replace_probs"):
            probs = getattr(self, name)
            if any(p < 0 for p in probs) or not np.isclose(sum(probs), 1.0):
                raise ValueError(f"{name} must be non-negative and sum to 1, got {probs}")
        if len(self.replace_probs) != 3:
            raise ValueError(f"replace_probs are (replace, random, keep), got {self.replace_probs}")
        if self.mode == "mask" and self.tokenizer.mask_token_id is None:
            raise ValueError("mode='mask' needs a tokenizer with a mask token")
        self._rng, self._rng_worker = np.random.default_rng(self.seed), None
        self._ngram_cdf = np.cumsum(self.ngram_probs)
        special = set(self.tokenizer.all_special_ids)
        tokens = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        self._random_pool = np.array([i for i in word_start_tokens(tokens) if i not in special])

    def __call__(self, features):
        self._reseed_in_worker()
        word_ids = [np.asarray(f["word_ids"], dtype=np.int64) for f in features]
        mask_seeds = [f.get("mask_seed") for f in features]
        plain = [{k: v for k, v in f.items() if k not in ("word_ids", "mask_seed")} for f in features]
        batch = self.tokenizer.pad(plain, return_tensors="pt", pad_to_multiple_of=self.pad_to_multiple_of)
        input_ids = batch["input_ids"].clone()
        labels = torch.full_like(input_ids, -100)
        ids, label_view = input_ids.numpy(), labels.numpy()  # numpy views share the tensors' memory
        if mask_seeds[0] is None:
            self._corrupt(ids, label_view, word_ids)
        else:  # each example's masks from its own seed (a token store's: exact on a resume, in any worker)
            stream = self._rng
            for row, seed in enumerate(mask_seeds):
                self._rng = np.random.default_rng(seed)
                self._corrupt(ids[row:row + 1], label_view[row:row + 1], word_ids[row:row + 1])
            self._rng = stream
        batch["input_ids"], batch["labels"] = input_ids, labels
        return batch

    def _reseed_in_worker(self):
        """DataLoader workers each get a copy of the generator: give each its own stream."""
        worker = torch.utils.data.get_worker_info()
        if worker is not None and self._rng_worker != (worker.id, worker.seed):
            entropy = [worker.seed] if self.seed is None else [self.seed, worker.seed]
            self._rng, self._rng_worker = np.random.default_rng(entropy), (worker.id, worker.seed)

    def select_words(self, num_words) -> list[int]:
        """Word indices to corrupt: N-grams of consecutive words until the word budget is used."""
        budget = max(1, round(num_words * self.word_mask_prob))
        sizes = np.searchsorted(self._ngram_cdf, self._rng.random(num_words), side="right") + 1
        selected, taken = [], set()
        for start, size in zip(self._rng.permutation(num_words).tolist(), sizes.tolist()):
            if len(selected) >= budget:
                break
            for word in range(start, min(start + min(size, budget - len(selected)), num_words)):
                if word in taken:
                    break
                taken.add(word)
                selected.append(word)
        return selected

    def _corrupt(self, ids, labels, word_ids):
        """Select and replace words of every row in place: ``ids``/``labels`` ``[batch, seq]``, ``word_ids`` per row."""
        rows, length = ids.shape
        # Number the words of the whole batch consecutively: row r's word w is ``w + first_word[r]``.
        num_words = np.array([w.max() + 1 if w.size else 0 for w in word_ids])
        first_word = np.concatenate([[0], np.cumsum(num_words)[:-1]])
        token_word = np.full((rows, length), -1)
        for row, words in enumerate(word_ids):
            token_word[row, :words.size] = np.where(words >= 0, words + first_word[row], -1)
        selected = np.array([word + first_word[row] for row in range(rows) if num_words[row]
                             for word in self.select_words(int(num_words[row]))], dtype=np.int64)

        # Per selected word: 0 = similar word (or [MASK]), 1 = random word, 2 = keep.
        action = np.full(int(num_words.sum()) + 1, -1)  # the extra last entry is what token_word == -1 indexes
        action[selected] = np.searchsorted(np.cumsum(self.replace_probs), self._rng.random(selected.size),
                                           side="right").clip(max=2)
        token_action = action[token_word]
        chosen = token_action >= 0
        labels[chosen] = ids[chosen]
        randomised = token_action == 1
        ids[randomised] = self._random_pool[self._rng.integers(len(self._random_pool), size=int(randomised.sum()))]
        if self.mode == "mask":
            ids[token_action == 0] = self.tokenizer.mask_token_id
            return
        flat_ids = ids.reshape(-1)
        positions = np.flatnonzero(token_action.reshape(-1) == 0)
        # A word's tokens are consecutive: a new word starts where the owning word changes.
        owner = token_word.reshape(-1)[positions]
        bounds = np.flatnonzero(np.diff(owner, prepend=-2, append=-2)).tolist()
        original_ids = flat_ids[positions].tolist()
        originals = [tuple(original_ids[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        self._fill_candidates(originals)
        fallback = self._random_pool[self._rng.integers(len(self._random_pool), size=positions.size)].tolist()
        replacement = []
        for (a, b), original, draw in zip(zip(bounds[:-1], bounds[1:]), originals, self._rng.random(len(originals))):
            candidates = self._candidates[original]
            replacement.extend(candidates[int(draw * len(candidates))] if candidates else fallback[a:b])
        flat_ids[positions] = replacement

    def _fill_candidates(self, originals):
        """Look up and tokenise the similar words of every word not yet in the cache, in one tokenizer call."""
        missing = list(dict.fromkeys(o for o in originals if o not in self._candidates))
        if not missing:
            return
        similar = [list(self.similar_words(self._spell(original))) for original in missing]
        # Candidates recur across words (synonym groups, shared neighbours): tokenise each string once.
        unseen = list(dict.fromkeys(c for candidates in similar for c in candidates if c not in self._tokenised))
        self._tokenised.update(zip(unseen, self._encode(unseen)))
        unk = self.tokenizer.unk_token_id
        for original, candidates in zip(missing, similar):
            tokenised = dict.fromkeys(self._tokenised[c] for c in candidates)
            self._candidates[original] = [c for c in tokenised if len(c) == len(original) and c != original
                                          and unk not in c]

    def _spell(self, token_ids):
        text = self.tokenizer.convert_tokens_to_string(self.tokenizer.convert_ids_to_tokens(list(token_ids))).strip()
        return "".join(text.split()) if CJK.search(text) else text

    def _encode(self, texts):
        if not texts:
            return []
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is not None:  # one Rust call
            return [tuple(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]
        return [tuple(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
