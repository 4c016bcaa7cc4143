"""ALBERT's sentence-order prediction (SOP) pairs, built with ``datasets.map(batched=True)``.

Each document is split into sentences (Chinese and English end punctuation, and line breaks);
consecutive sentences are gathered until a target length is reached (``max_length`` less the
pair's special tokens, or with probability ``short_seq_prob`` a random shorter one), cut at a random sentence boundary
into segments A and B, and swapped with probability 0.5: ``sentence_order_label`` 1 = swapped,
0 = original order (``AlbertForPreTraining``'s convention).

A chunk that holds a single sentence is split at a word boundary in its middle instead, so that
A and B still come from the same document in a known order (ALBERT's reference code falls back
to a random document here, which is NSP rather than SOP). A chunk with fewer than two words is
dropped. Each output row also carries ``word_ids`` for whole-word masking.

A pair is framed as the tokenizer frames one (:class:`PairFrame`): ``[CLS] A [SEP] B [SEP]`` with token types 0/1
for BERT's, ``<s> A </s></s> B </s>`` with one token type for RoBERTa's.
"""

import re

import numpy as np

from hf_plm_ext.data.correction_masking import add_word_ids
from hf_plm_ext.errors import UserInputError

SENTENCE_END = re.compile(r"(?<=[。！？!?；;…])|(?<=[.])\s+")


class PairFrame:
    """The special tokens around and between a pair, as ``tokenizer`` puts them (its post-processor's count of a
    pair's specials: 3 for ``[CLS] A [SEP] B [SEP]``, 4 for RoBERTa's ``<s> A </s></s> B </s>``), and the token
    types: 0 for A's part and 1 for B's where the tokenizer returns ``token_type_ids``, else all 0 (RoBERTa's one
    token type)."""

    def __init__(self, tokenizer):
        specials = tokenizer.num_special_tokens_to_add(pair=True)
        if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None or specials < 3:
            raise UserInputError("sentence-order pairs need a tokenizer that frames a pair with a start token and "
                                 "separators ([CLS] A [SEP] B [SEP], or <s> A </s></s> B </s>)")
        self.opening, self.closing = [tokenizer.cls_token_id], [tokenizer.sep_token_id]
        self.between = [tokenizer.sep_token_id] * (specials - 2)
        self.token_types = "token_type_ids" in tokenizer.model_input_names
        self.specials = specials

    def input_ids(self, first, second) -> list:
        return [*self.opening, *first, *self.between, *second, *self.closing]

    def token_type_ids(self, first_length: int, second_length: int) -> list:
        first_part = len(self.opening) + first_length + len(self.between)
        second_part = second_length + len(self.closing)
        return [0] * first_part + [int(self.token_types)] * second_part

    def word_ids(self, first_words, second_words) -> list:
        """Per-token word keys with ``None`` at the special tokens."""
        return [None] * len(self.opening) + list(first_words) + [None] * len(self.between) + list(second_words) + \
            [None] * len(self.closing)


def split_sentences(document):
    """Sentences of ``document``: split at line breaks and after 。！？!?；;… and '. '."""
    return [s.strip() for line in document.splitlines() for s in SENTENCE_END.split(line) if s and s.strip()]


def build_sop_pairs(batch, indices, tokenizer, max_length=128, short_seq_prob=0.1, segmenter=None, seed=0,
                    text_column="text"):
    """``datasets.map(batched=True, with_indices=True, remove_columns=...)`` function: documents -> SOP pairs.

    Reproducible: the random choices for a document depend only on ``seed`` and its row index.
    """
    frame = PairFrame(tokenizer)
    max_tokens = max_length - frame.specials
    columns = {"input_ids": [], "token_type_ids": [], "attention_mask": [], "word_ids": [],
               "sentence_order_label": []}
    for document, index in zip(batch[text_column], indices):
        rng = np.random.default_rng([seed, index])
        sentences = split_sentences(document)
        if not sentences:
            continue
        encoded = add_word_ids({"text": sentences}, tokenizer, segmenter, max_length=max_tokens,
                               add_special_tokens=False)
        segments = [list(zip(ids, [(k, w) for w in words]))
                    for k, (ids, words) in enumerate(zip(encoded["input_ids"], encoded["word_ids"])) if ids]
        for chunk in _chunks(segments, max_tokens, short_seq_prob, rng):
            pair = _split_pair(chunk, rng)
            if pair is None:
                continue
            first, second = truncate_pair(*pair, max_tokens, rng)
            swapped = rng.random() < 0.5
            if swapped:
                first, second = second, first
            _append_pair(columns, frame, first, second, int(swapped))
    return columns


def _chunks(segments, max_tokens, short_seq_prob, rng):
    def draw_target():
        return int(rng.integers(2, max_tokens + 1)) if rng.random() < short_seq_prob else max_tokens

    chunk, length, target = [], 0, draw_target()
    for k, segment in enumerate(segments):
        chunk.append(segment)
        length += len(segment)
        if k == len(segments) - 1 or length >= target:
            yield chunk
            chunk, length, target = [], 0, draw_target()


def _split_pair(chunk, rng):
    if len(chunk) >= 2:
        cut = int(rng.integers(1, len(chunk)))
        return [t for s in chunk[:cut] for t in s], [t for s in chunk[cut:] for t in s]
    tokens = chunk[0]
    word_starts = [i for i in range(1, len(tokens)) if tokens[i][1] != tokens[i - 1][1] and tokens[i][1][1] >= 0]
    if not word_starts:
        return None
    cut = word_starts[len(word_starts) // 2]
    return tokens[:cut], tokens[cut:]


def truncate_pair(first, second, max_tokens, rng):
    """Trim the longer segment, from its front or back at random, until both fit (ALBERT's rule)."""
    first, second = list(first), list(second)
    while len(first) + len(second) > max_tokens:
        longer = first if len(first) > len(second) else second
        longer.pop(0 if rng.random() < 0.5 else -1)
    return first, second


def _append_pair(columns, frame, first, second, label):
    ids = frame.input_ids([t for t, _ in first], [t for t, _ in second])
    keys = frame.word_ids([w for _, w in first], [w for _, w in second])  # (sentence, word) or None
    numbers = {}
    word_ids = [-1 if key is None or key[1] < 0 else numbers.setdefault(key, len(numbers)) for key in keys]
    columns["input_ids"].append(ids)
    columns["token_type_ids"].append(frame.token_type_ids(len(first), len(second)))
    columns["attention_mask"].append([1] * len(ids))
    columns["word_ids"].append(word_ids)
    columns["sentence_order_label"].append(label)
