"""The objectives' training examples read from a token store: map-style datasets over its memory maps, so that a
resume is an offset (the Trainer's sampler skips indices, no batch is read again) and an example's masks are
drawn from ``(seed, epoch, example)`` alone, the same after a resume, in any worker, on any rank.
"""

import copy
import math

import numpy as np
import torch
from transformers import TrainerCallback

from hf_plm_ext.data.sop import PairFrame, truncate_pair
from hf_plm_ext.data.token_store.format import TokenStore
from hf_plm_ext.errors import UserInputError

STORE_EVAL_SAMPLES = 10_000  # a store's default held-out examples: 5 % of a large store would take hours


class TokenBlocks(torch.utils.data.Dataset):
    """Blocks of ``block_length`` tokens, ``opening + body + closing`` (``[CLS] ... [SEP]``), the bodies cut from
    the store's token stream end to end across documents and shards, as ``run_mlm.py``'s ``group_texts`` (only the
    stream's last partial body is dropped). Every ``holdout_every``-th block is held out (``split="test"``).

    Block ``b`` is ``tokens[b * body : (b + 1) * body]``: computed, not stored, so the dataset costs nothing to
    open whatever the store's size. ``mask`` (an :class:`ExampleMasking`) turns a block into ``input_ids`` and
    ``labels`` drawn from ``(seed, epoch, b)``.
    """

    def __init__(self, store: TokenStore, opening: list[int], closing: list[int], block_length: int, split: str,
                 holdout_every: int, mask=None):
        self.store, self.opening, self.closing = store, np.asarray(opening), np.asarray(closing)
        self.body = block_length - len(opening) - len(closing)
        self.blocks = store.num_tokens // self.body
        self.split, self.holdout_every, self.mask, self.epoch = split, holdout_every, mask, 0
        held_out = self.blocks // holdout_every
        self.length = held_out if split == "test" else self.blocks - held_out
        if self.length < 1:
            raise UserInputError(f"--data {store.folder} ({store.num_tokens:,} tokens) gives no {split} block of "
                                 f"{block_length} tokens (one in {holdout_every} is held out)")

    def __len__(self) -> int:
        return self.length

    def block_number(self, index: int) -> int:
        """The store's block behind this split's ``index``: held out are blocks ``k-1, 2k-1, ...``."""
        if not 0 <= index < self.length:
            raise IndexError(index)
        k = self.holdout_every
        return index * k + k - 1 if self.split == "test" else index + index // (k - 1)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, index: int) -> dict:
        block = self.block_number(index)
        body = self.store.tokens(block * self.body, (block + 1) * self.body).astype(np.int64)
        ids = np.concatenate([self.opening, body, self.closing])
        if self.mask is None:
            return {"input_ids": torch.from_numpy(ids)}
        masked, labels = self.mask(ids, block, 0 if self.split == "test" else self.epoch)  # fixed held-out masks
        return {"input_ids": torch.from_numpy(masked), "labels": torch.from_numpy(labels)}


class ExampleMasking:
    """BERT's masking of one example, as ``DataCollatorForLanguageModeling`` draws it (each non-special token
    selected with ``probability``; of those 80 % ``[MASK]``, 10 % a random token of the vocabulary, 10 % kept;
    ``labels`` -100 elsewhere), from a generator seeded by ``(seed, epoch, example)``."""

    def __init__(self, tokenizer, probability: float, seed: int):
        self.mask_id, self.vocabulary = tokenizer.mask_token_id, len(tokenizer)
        self.special = np.array(sorted(tokenizer.all_special_ids))
        self.probability, self.seed = probability, seed
        if self.mask_id is None:
            raise UserInputError("the tokenizer has no mask token, which masked-LM pre-training needs")

    def __call__(self, ids: np.ndarray, example: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch, example])
        selected = (rng.random(len(ids)) < self.probability) & ~np.isin(ids, self.special)
        labels = np.where(selected, ids, -100)
        draw = rng.random(len(ids))
        masked = ids.copy()
        masked[selected & (draw < 0.8)] = self.mask_id
        randomised = selected & (draw >= 0.8) & (draw < 0.9)
        masked[randomised] = rng.integers(0, self.vocabulary, int(randomised.sum()))
        return masked, labels


class EpochToDatasets(TrainerCallback):
    """Tells the training dataset the epoch as each begins (before the Trainer makes its loader, and so its
    workers), so that a second epoch draws other masks, and a resume in epoch ``e`` draws epoch ``e``'s."""

    def __init__(self, dataset):
        self.dataset = dataset

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.dataset.set_epoch(math.floor(state.epoch + 1e-9))


def stack_examples(features: list[dict]) -> dict:
    """The collator of equal-length examples: each field stacked."""
    return {name: torch.stack([feature[name] for feature in features]) for name in features[0]}


def stack_with_causal_labels(features: list[dict]) -> dict:
    """A causal LM's batch: the blocks stacked, each its own labels (the model shifts them)."""
    batch = stack_examples(features)
    return {**batch, "labels": batch["input_ids"].clone()}


def store_blocks(store_path, tokenizer, tokenizer_dir, block_length: int, validation_fraction: float,
                 mask=None, opening=None, closing=None) -> dict:
    """``{"train", "test"}`` :class:`TokenBlocks` of the store at ``store_path``, checked against the tokenizer."""
    store = TokenStore(store_path, tokenizer_dir)
    if block_length < 8:
        raise UserInputError(f"--max_seq_length must be at least 8, got {block_length}")
    every = max(2, round(1 / validation_fraction))
    return {split: TokenBlocks(store, opening, closing, block_length, split, every, mask)
            for split in ("train", "test")}


def at_most(dataset, count: int | None):
    """The first ``count`` examples of a held-out split (all of it when None or fewer)."""
    if count is None or len(dataset) <= count:
        return dataset
    if hasattr(dataset, "select"):  # a datasets.Dataset
        return dataset.select(range(count))
    return torch.utils.data.Subset(dataset, range(count))


class SentencePairs(torch.utils.data.Dataset):
    """ALBERT's sentence-order pairs (``data.sop.build_sop_pairs``'s rules) from a store's documents, sentence and
    word starts, one per chunk of a document: chunk ``k`` of a document holds the sentences that start in its
    tokens ``[k * T, (k + 1) * T)``, ``T = max_length`` less the pair's special tokens, so the chunks are found
    with array code, shard by shard, when the dataset is made. An example is built when it is read, its random
    choices (a shorter target with ``short_seq_prob``, the cut between A and B, the truncation, the swap) drawn from
    ``(seed, chunk)``, as the text path draws them from ``(seed, document)``; ``mask_seed`` is ``(seed, epoch,
    chunk)`` for the collator's masks.
    """

    def __init__(self, store: TokenStore, tokenizer, max_length: int, short_seq_prob: float, seed: int, split: str,
                 holdout_every: int):
        store.check_has("sentences")
        store.check_has("words")
        self.frame = PairFrame(tokenizer)
        self.store, self.short_seq_prob, self.seed = store, short_seq_prob, seed
        self.max_tokens = max_length - self.frame.specials
        self.split, self.epoch = split, 0
        starts, ends = [], []
        for number, shard in enumerate(store.shards):
            offset = int(store.shard_offsets[number])
            document_ends = shard.document_ends
            document_starts = np.concatenate([[0], document_ends[:-1]])
            sentences = np.flatnonzero(np.unpackbits(shard.starts("sentences"), count=shard.tokens))
            document = np.searchsorted(document_ends, sentences, side="right")
            key = document * (shard.tokens + 1) + (sentences - document_starts[document]) // self.max_tokens
            first = np.concatenate([[True], key[1:] != key[:-1]])
            chunk_starts = sentences[first]
            chunk_document = document[first]
            next_start = np.concatenate([chunk_starts[1:], [shard.tokens]])
            chunk_ends = np.minimum(next_start, document_ends[chunk_document])
            starts.append(chunk_starts + offset)
            ends.append(chunk_ends + offset)
        self.starts, self.ends = np.concatenate(starts), np.concatenate(ends)
        keep = self.ends - self.starts >= 2  # a pair needs a token on each side
        chunks = np.flatnonzero(keep)
        held = (np.arange(len(chunks)) % holdout_every) == holdout_every - 1
        self.chunks = chunks[held] if split == "test" else chunks[~held]
        if len(self.chunks) < 1:
            raise UserInputError(f"--data {store.folder} gives no {split} sentence pair")

    def __len__(self) -> int:
        return len(self.chunks)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def bits(self, boundary: str, start: int, stop: int) -> np.ndarray:
        """A boundary's bits for global token positions ``[start, stop)`` (one shard: a chunk never crosses)."""
        shard = int(np.searchsorted(self.store.shard_offsets, start, side="right")) - 1
        local = start - int(self.store.shard_offsets[shard])
        packed = self.store.shards[shard].starts(boundary)[local // 8:(local + stop - start + 7) // 8 + 1]
        return np.unpackbits(packed)[local % 8:local % 8 + stop - start].astype(bool)

    def __getitem__(self, index: int) -> dict:
        chunk = int(self.chunks[index])
        start, stop = int(self.starts[chunk]), int(self.ends[chunk])
        rng = np.random.default_rng([self.seed, chunk])
        if rng.random() < self.short_seq_prob:
            stop = min(stop, start + int(rng.integers(2, self.max_tokens + 1)))
        ids = self.store.tokens(start, stop).astype(np.int64)
        sentence_starts = np.flatnonzero(self.bits("sentences", start, stop))
        word_starts = self.bits("words", start, stop)
        inner = sentence_starts[sentence_starts > 0]
        if len(inner):  # between two sentences
            cut = int(inner[rng.integers(0, len(inner))])
        else:  # one sentence: at a word start in its middle (or its middle token)
            words = np.flatnonzero(word_starts[1:]) + 1
            cut = int(words[len(words) // 2]) if len(words) else len(ids) // 2
        first, second = (np.array(part, dtype=np.int64) for part in
                         truncate_pair(range(cut), range(cut, len(ids)), self.max_tokens, rng))
        swapped = rng.random() < 0.5
        if swapped:
            first, second = second, first
        positions = np.concatenate([first, second])
        word_number = np.cumsum(word_starts)[positions] - 1
        word_number = np.array([-1 if number is None else number for number in
                                self.frame.word_ids(word_number[:len(first)], word_number[len(first):])])
        words, first_seen, inverse = np.unique(word_number[word_number >= 0], return_index=True, return_inverse=True)
        order = np.empty(len(words), dtype=np.int64)
        order[np.argsort(first_seen)] = np.arange(len(words))  # numbered as they appear (B may come first)
        word_ids = np.full(len(word_number), -1)
        word_ids[word_number >= 0] = order[inverse]
        input_ids = self.frame.input_ids(ids[first].tolist(), ids[second].tolist())
        return {"input_ids": input_ids,
                "token_type_ids": self.frame.token_type_ids(len(first), len(second)),
                "attention_mask": [1] * len(input_ids), "word_ids": word_ids.tolist(),
                "sentence_order_label": int(swapped),
                "mask_seed": [self.seed, 0 if self.split == "test" else self.epoch, chunk]}  # fixed held-out masks


def sentence_pairs(store_path, tokenizer, tokenizer_dir, max_length: int, short_seq_prob: float, seed: int,
                   validation_fraction: float) -> dict:
    store = TokenStore(store_path, tokenizer_dir, needs=("sentences", "words"))
    every = max(2, round(1 / validation_fraction))
    return {split: SentencePairs(store, tokenizer, max_length, short_seq_prob, seed, split, every)
            for split in ("train", "test")}


class DocumentStream:
    """A store's documents as one token stream, each followed by ``end`` (Transformer-XL's ``<eos>`` per line, as
    ``data.segment_streams.tokenize_stream`` makes it from text), sliced as a tensor is: ``stream[a:b]``. Only the
    document ends are held in memory (8 bytes a document); tokens are read from the memory maps per slice."""

    def __init__(self, store: TokenStore, end: int):
        self.store, self.end = store, end
        document_ends = np.concatenate([shard.document_ends + offset for shard, offset
                                        in zip(store.shards, store.shard_offsets[:-1])])
        self.eos_positions = document_ends + np.arange(len(document_ends))  # the i-th end follows i earlier ones
        self.start, self.stop = 0, store.num_tokens + len(document_ends)

    def __len__(self) -> int:
        return self.stop - self.start

    def split(self, at: int) -> tuple["DocumentStream", "DocumentStream"]:
        """``(stream[:at], stream[at:])``, sharing the document ends."""
        head, tail = copy.copy(self), copy.copy(self)
        head.stop = tail.start = self.start + at
        return head, tail

    def __getitem__(self, span: slice) -> torch.Tensor:
        a, b = self.start + (span.start or 0), self.start + (len(self) if span.stop is None else span.stop)
        first, last = np.searchsorted(self.eos_positions, [a, b])
        ends = self.eos_positions[first:last]  # stream positions of the ends inside [a, b)
        token_start, token_stop = a - first, b - last  # tokens before a / b: the positions less the ends before
        tokens = self.store.tokens(token_start, token_stop).astype(np.int64) if token_stop > token_start \
            else np.zeros(0, np.int64)
        out = np.empty(b - a, dtype=np.int64)
        is_end = np.zeros(b - a, dtype=bool)
        is_end[ends - a] = True
        out[is_end], out[~is_end] = self.end, tokens
        return torch.from_numpy(out)
