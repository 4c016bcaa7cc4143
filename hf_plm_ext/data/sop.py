"""ALBERT's sentence-order prediction (SOP) pairs, built with ``datasets.map(batched=True)``.

Each document is split into sentences (Chinese and English end punctuation, and line breaks);
consecutive sentences are gathered until a target length is reached (``max_length`` - 3, or
with probability ``short_seq_prob`` a random shorter one), cut at a random sentence boundary
into segments A and B, and swapped with probability 0.5: ``sentence_order_label`` 1 = swapped,
0 = original order (``AlbertForPreTraining``'s convention).

A chunk that holds a single sentence is split at a word boundary in its middle instead, so that
A and B still come from the same document in a known order (ALBERT's reference code falls back
to a random document here, which is NSP rather than SOP). A chunk with fewer than two words is
dropped. Each output row also carries ``word_ids`` for whole-word masking.
"""

import re

import numpy as np

from hf_plm_ext.data.correction_masking import add_word_ids

SENTENCE_END = re.compile(r"(?<=[。！？!?；;…])|(?<=[.])\s+")


def split_sentences(document):
    """Sentences of ``document``: split at line breaks and after 。！？!?；;… and '. '."""
    return [s.strip() for line in document.splitlines() for s in SENTENCE_END.split(line) if s and s.strip()]


def build_sop_pairs(batch, indices, tokenizer, max_length=128, short_seq_prob=0.1, segmenter=None, seed=0,
                    text_column="text"):
    """``datasets.map(batched=True, with_indices=True, remove_columns=...)`` function: documents -> SOP pairs.

    Reproducible: the random choices for a document depend only on ``seed`` and its row index.
    """
    max_tokens = max_length - 3
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
            _append_pair(columns, tokenizer, first, second, int(swapped))
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


def _append_pair(columns, tokenizer, first, second, label):
    ids = [tokenizer.cls_token_id, *(t for t, _ in first), tokenizer.sep_token_id,
           *(t for t, _ in second), tokenizer.sep_token_id]
    keys = [None, *(w for _, w in first), None, *(w for _, w in second), None]  # (sentence, word) or None
    numbers = {}
    word_ids = [-1 if key is None or key[1] < 0 else numbers.setdefault(key, len(numbers)) for key in keys]
    columns["input_ids"].append(ids)
    columns["token_type_ids"].append([0] * (len(first) + 2) + [1] * (len(second) + 1))
    columns["attention_mask"].append([1] * len(ids))
    columns["word_ids"].append(word_ids)
    columns["sentence_order_label"].append(label)
