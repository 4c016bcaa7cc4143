"""The two pipeline steps of ``corpus prepare``, datatrove ``PipelineStep`` s (``run(data, rank, world_size)``):
imported only once datatrove is known to be installed (the ``corpus`` extra)."""

import json
import os
import time
from itertools import chain
from pathlib import Path

import numpy as np
from datatrove.data import Document
from datatrove.pipeline.base import PipelineStep

from hf_plm_ext.data.correction_masking import jieba_spans
from hf_plm_ext.data.sop import SENTENCE_END
from hf_plm_ext.data.token_store.format import shard_name
from hf_plm_ext.data.token_store.sources import Piece, read_piece


class ReadPieces(PipelineStep):
    """Task ``rank`` reads piece ``rank`` of the corpus (:mod:`sources`)."""

    name, type = "read pieces", "hf-plm-ext"

    def __init__(self, pieces: list[Piece], documents: str, text_field: str):
        super().__init__()
        self.pieces, self.documents, self.text_field = pieces, documents, text_field

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        piece, number = self.pieces[rank], 0
        for number, text in enumerate(read_piece(piece, self.documents, self.text_field), start=1):
            yield Document(text=text, id=f"{rank}/{number}")
        self.stat_update("documents read", value=number)  # once: a call per document costs 5 % of the task


class WriteShard(PipelineStep):
    """Tokenises task ``rank``'s documents (batches of ``encode_batch``, one thread: the executor's workers are the
    parallelism) and writes shard ``rank``: ids, document ends, and the sentence and word starts asked for."""

    name, type = "write shard", "hf-plm-ext"

    def __init__(self, folder: str, tokenizer_file: str, dtype: str, sentences: bool, words: bool,
                 segmenter: str | None, batch_size: int = 1000):
        super().__init__()
        self.folder, self.tokenizer_file, self.dtype = folder, tokenizer_file, dtype
        self.sentences, self.words, self.segmenter, self.batch_size = sentences, words, segmenter, batch_size

    def run(self, data, rank: int = 0, world_size: int = 1):
        started = time.perf_counter()
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(self.tokenizer_file)
        writer = ShardWriter(Path(self.folder) / shard_name(rank), np.dtype(self.dtype),
                             [name for name, asked in (("sentences", self.sentences), ("words", self.words)) if asked])
        batch = []
        for document in chain(data, [None]):
            if document is not None:
                batch.append(document.text)
            if batch and (document is None or len(batch) == self.batch_size):
                with self.track_time(unit="batch"):
                    writer.add(batch, tokenizer.encode_batch(batch, add_special_tokens=False), self.segmenter)
                batch = []
        writer.close(seconds=time.perf_counter() - started)
        self.stat_update("tokens", value=writer.tokens)
        self.stat_update("documents", value=writer.documents)
        yield from ()


class BitWriter:
    """Appends bits to a file, packed 8 to a byte (``numpy.packbits``' order), carrying a partial byte over."""

    def __init__(self, path: Path):
        self.stream, self.carry = open(path, "wb"), np.zeros(0, dtype=bool)

    def add(self, bits: np.ndarray) -> None:
        bits = np.concatenate([self.carry, bits.astype(bool)])
        whole = len(bits) // 8 * 8
        self.stream.write(np.packbits(bits[:whole]).tobytes())
        self.carry = bits[whole:]

    def close(self) -> None:
        if len(self.carry):
            self.stream.write(np.packbits(self.carry).tobytes())
        self.stream.close()


class ShardWriter:
    """One shard's files, written as the batches come (memory stays one batch's, whatever the shard's size)."""

    def __init__(self, path: Path, dtype, boundaries: list[str]):
        self.path, self.dtype, self.boundaries = path, dtype, boundaries
        self.ids = open(path, "wb")
        self.bits = {name: BitWriter(Path(f"{path}.{name}")) for name in boundaries}
        self.ends, self.tokens, self.documents, self.empty = [], 0, 0, 0

    def add(self, texts: list[str], encodings, segmenter: str | None) -> None:
        lengths = np.array([len(encoding.ids) for encoding in encodings], dtype=np.int64)
        kept = lengths > 0  # a document without tokens (blank, or only characters the tokenizer drops) has no end
        self.empty += int((~kept).sum())
        total = int(lengths.sum())
        ids = np.fromiter(chain.from_iterable(encoding.ids for encoding in encodings), dtype=np.int64, count=total)
        self.ids.write(ids.astype(self.dtype.newbyteorder("<")).tobytes())
        self.ends.append(self.tokens + np.cumsum(lengths)[kept])
        if "sentences" in self.boundaries:
            self.bits["sentences"].add(np.concatenate([sentence_starts(text, encoding)
                                                       for text, encoding in zip(texts, encodings)] or [[]]))
        if "words" in self.boundaries:
            self.bits["words"].add(np.concatenate([word_starts(text, encoding, segmenter)
                                                   for text, encoding in zip(texts, encodings)] or [[]]))
        self.tokens += total
        self.documents += int(kept.sum())

    def close(self, seconds: float) -> None:
        self.ids.close()
        for bits in self.bits.values():
            bits.close()
        ends = np.concatenate(self.ends) if self.ends else np.zeros(0, dtype=np.int64)
        Path(f"{self.path}.index").write_bytes(ends.astype("<u8").tobytes())
        counts = {"tokens": self.tokens, "documents": self.documents, "empty_documents": self.empty,
                  "seconds": round(seconds, 3)}
        Path(f"{self.path}.json").write_text(json.dumps(counts) + "\n")  # last: the shard is whole


def starts_of(spans_start: list[int], encoding) -> np.ndarray:
    """1 where a token is the first of a span (a sentence, a word), the spans given by their first characters."""
    if not encoding.offsets:
        return np.zeros(0, dtype=bool)
    token_starts = np.array([start for start, _ in encoding.offsets])
    span = np.searchsorted(np.asarray(spans_start), token_starts, side="right")
    return np.concatenate([[True], span[1:] != span[:-1]])


def sentence_starts(text: str, encoding) -> np.ndarray:
    """Sentences as the text path splits them (``data.sop.split_sentences``): at line breaks and after end
    punctuation."""
    starts, offset = [], 0
    for line in text.splitlines(keepends=True):
        starts += [offset] + [offset + match.end() for match in SENTENCE_END.finditer(line)]
        offset += len(line)
    return starts_of(sorted(set(starts)), encoding)


def word_starts(text: str, encoding, segmenter: str | None) -> np.ndarray:
    """Words as the text path's whole-word masking takes them: the tokenizer's pre-tokenisation, or jieba's
    words for Chinese (``data.correction_masking.add_word_ids``)."""
    if segmenter == "jieba":
        return starts_of([start for start, _ in jieba_spans(text)] or [0], encoding)
    word_ids = np.array([-1 if w is None else w for w in encoding.word_ids])
    if not len(word_ids):
        return np.zeros(0, dtype=bool)
    return np.concatenate([[True], word_ids[1:] != word_ids[:-1]])
