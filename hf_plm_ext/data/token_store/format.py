"""The token store on disk, and reading it back through memory maps.

A store is a folder, datatrove's layout plus two optional bitmaps:

- ``NNNNN.ds``: the token ids of one shard (one task of ``corpus prepare``), little-endian ``uint16`` where the
  vocabulary fits, else ``uint32``; documents one after the other.
- ``NNNNN.ds.index``: ``uint64`` document ends, in tokens from the start of the shard (datatrove's ``.index``).
- ``NNNNN.ds.sentences`` / ``NNNNN.ds.words``: one bit per token (``numpy.packbits``, big bit order), set where a
  sentence / a word starts. Written only when asked (``--sentences``, ``--words`` or ``--segmenter``).
- ``store.json``: what made it (the tokenizer's name and a sha256 of its ``tokenizer.json``, the sources, the
  settings) and what it holds (per shard its tokens and documents; the totals).

datatrove's ``DatatroveFolderDataset`` and nanotron read the ``.ds`` files as they are.
"""

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from hf_plm_ext.errors import UserInputError

MANIFEST = "store.json"
FORMAT = "hf-plm-ext token store"
VERSION = 1
# the flag of `corpus prepare` that records each optional boundary
BOUNDARY_FLAGS = {"sentences": "--sentences", "words": "--words (or --segmenter jieba)"}


def shard_name(rank: int) -> str:
    return f"{rank:05d}.ds"


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def tokenizer_digest(tokenizer_dir) -> str:
    """The tokenizer's identity: a sha256 of its ``tokenizer.json`` (vocabulary, normaliser, pre-tokeniser)."""
    path = Path(tokenizer_dir) / "tokenizer.json"
    if not path.is_file():
        raise UserInputError(f"{tokenizer_dir} has no tokenizer.json: a token store needs a fast tokenizer's folder "
                             f"(e.g. from `hf-plm-ext tokenizer train`)")
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


@dataclass
class Shard:
    """One shard's files, memory-mapped."""

    path: Path
    tokens: int
    documents: int
    dtype: object

    @cached_property
    def ids(self) -> np.ndarray:
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.tokens,)) if self.tokens else \
            np.zeros(0, self.dtype)

    @cached_property
    def document_ends(self) -> np.ndarray:
        """Read when an objective needs the documents (pairs, streams), not to open the store."""
        return np.fromfile(f"{self.path}.index", dtype="<u8").astype(np.int64)

    def starts(self, boundary: str) -> np.ndarray:
        """The packed bits of a boundary (``sentences`` / ``words``), memory-mapped."""
        return np.memmap(f"{self.path}.{boundary}", dtype=np.uint8, mode="r")


class TokenStore:
    """A store folder, checked: complete (its manifest), made with the tokenizer expected, every file of the size
    its counts give (a cut or damaged file is named)."""

    def __init__(self, folder, tokenizer_dir=None, needs=()):
        self.folder = Path(folder)
        manifest_path = self.folder / MANIFEST
        if not self.folder.is_dir():
            raise UserInputError(f"--data {folder}: no such folder (make one with `hf-plm-ext corpus prepare`)")
        if not manifest_path.is_file():
            raise UserInputError(f"--data {folder}: not a token store (no {MANIFEST}; `hf-plm-ext corpus prepare` "
                                 f"makes one)")
        try:
            self.manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise UserInputError(f"{manifest_path}: damaged (not JSON)") from None
        if self.manifest.get("format") != FORMAT or self.manifest.get("version") != VERSION:
            raise UserInputError(f"{manifest_path}: not a version-{VERSION} {FORMAT}")
        self.dtype = np.dtype(self.manifest["dtype"])
        self.boundaries = list(self.manifest["boundaries"])
        self.shards = [Shard(self.folder / entry["name"], entry["tokens"], entry["documents"], self.dtype)
                       for entry in self.manifest["shards"]]
        self._check_files()
        if tokenizer_dir is not None:
            self.check_tokenizer(tokenizer_dir)
        for boundary in needs:
            self.check_has(boundary)
        self.shard_offsets = np.cumsum([0] + [shard.tokens for shard in self.shards])

    @property
    def num_tokens(self) -> int:
        return int(self.shard_offsets[-1])

    @property
    def num_documents(self) -> int:
        return sum(shard.documents for shard in self.shards)

    def check_tokenizer(self, tokenizer_dir) -> None:
        made_with = self.manifest["tokenizer"]
        if tokenizer_digest(tokenizer_dir) != made_with["sha256"]:
            raise UserInputError(f"--data {self.folder} was tokenised with another tokenizer ({made_with['path']}, "
                                 f"sha256 {made_with['sha256'][:12]}...) than --tokenizer {tokenizer_dir}; use that "
                                 f"one, or prepare the corpus again with this one")

    def check_has(self, boundary: str) -> None:
        if boundary not in self.boundaries:
            raise UserInputError(f"--data {self.folder} records no {boundary} boundaries, which this objective needs: "
                                 f"prepare it with `corpus prepare ... {BOUNDARY_FLAGS[boundary]}`")

    def _check_files(self) -> None:
        for shard in self.shards:
            expected = {shard.path: shard.tokens * self.dtype.itemsize,
                        Path(f"{shard.path}.index"): shard.documents * 8}
            for boundary in self.boundaries[1:]:
                expected[Path(f"{shard.path}.{boundary}")] = (shard.tokens + 7) // 8
            for path, size in expected.items():
                if not path.is_file():
                    raise UserInputError(f"--data {self.folder}: {path.name} is missing (the store is damaged; "
                                         f"prepare it again)")
                if path.stat().st_size != size:
                    raise UserInputError(f"--data {self.folder}: {path.name} holds {path.stat().st_size} bytes, "
                                         f"{size} expected (cut or damaged; prepare the store again)")
            if shard.documents and self._last_end(shard) != shard.tokens:  # O(1): opening costs no reading
                raise UserInputError(f"--data {self.folder}: {shard.path.name}.index does not end at the shard's "
                                     f"{shard.tokens} tokens (damaged; prepare the store again)")

    @staticmethod
    def _last_end(shard: Shard) -> int:
        with open(f"{shard.path}.index", "rb") as stream:
            stream.seek(-8, 2)
            return int(np.frombuffer(stream.read(8), dtype="<u8")[0])

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """The ids of global token positions ``[start, stop)``, across shards."""
        first = int(np.searchsorted(self.shard_offsets, start, side="right")) - 1
        pieces = []
        while start < stop:
            shard, offset = self.shards[first], int(self.shard_offsets[first])
            end = min(stop, offset + shard.tokens)
            pieces.append(shard.ids[start - offset:end - offset])
            start, first = end, first + 1
        return np.concatenate(pieces) if len(pieces) > 1 else np.asarray(pieces[0])
