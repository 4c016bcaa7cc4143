"""Token streams cut into consecutive segments for models with segment memory (Transformer-XL).

The reference's ordered iterator (``LMOrderedIterator``): the corpus becomes one token stream,
split into ``batch_size`` parallel streams; batch ``t`` holds segment ``t`` of every stream,
so a model's memory of batch ``t`` is the context of batch ``t + 1``. Targets are the next
tokens (``shift_labels``): every token but each stream's first is predicted exactly once.

:class:`StreamSegments` is a map-style dataset laid out for the stock ``Trainer`` with
``train_sampling_strategy="sequential"``: its items, read in order in batches of
``batch_size``, are those batches. Under ``torchrun`` the Trainer hands batch ``g`` to rank
``g % world_size``, so the layout interleaves the ranks: each rank reads its own
``batch_size`` streams in order.
"""

from pathlib import Path

import torch
from torch.utils.data import Dataset

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_file


def eos_id(tokenizer) -> int:
    """The id appended to every line (``<eos>`` of word-level tokenizers, else the tokenizer's eos/sep)."""
    vocabulary = tokenizer.get_vocab()
    if "<eos>" in vocabulary:
        return vocabulary["<eos>"]
    for token_id in (tokenizer.eos_token_id, tokenizer.sep_token_id):
        if token_id is not None:
            return token_id
    raise UserInputError("the tokenizer has no <eos>, eos or [SEP] token to end each line with")


def tokenize_stream(files, tokenizer, batch_lines=10_000) -> torch.Tensor:
    """Every line of ``files`` (blank ones too) tokenised without special tokens, each followed by eos."""
    end = eos_id(tokenizer)
    ids = []
    for name in files:
        path = check_file(name, "corpus file")
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise UserInputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        for start in range(0, len(lines), batch_lines):
            encoded = tokenizer(lines[start:start + batch_lines], add_special_tokens=False, verbose=False)["input_ids"]
            for line in encoded:
                ids.extend(line)
                ids.append(end)
    return torch.tensor(ids, dtype=torch.long)


class StreamSegments(Dataset):
    """Segments of ``segment_length`` tokens from ``batch_size * world_size`` parallel streams.

    Item ``k`` belongs to global batch ``g = k // batch_size``: segment ``g // world_size`` of
    stream ``(g % world_size) * batch_size + k % batch_size``. Each item is
    ``{"input_ids": [n], "shift_labels": [n]}`` with ``n = segment_length`` (the last segment of
    the streams may be shorter; it is equally short in all of them).
    """

    def __init__(self, token_ids: torch.Tensor, batch_size: int, segment_length: int, world_size: int = 1):
        if batch_size < 1 or segment_length < 1 or world_size < 1:
            raise UserInputError(f"batch size ({batch_size}), segment length ({segment_length}) and world size "
                                 f"({world_size}) must be positive")
        self.batch_size, self.segment_length, self.world_size = batch_size, segment_length, world_size
        self.n_streams = batch_size * world_size
        self.stream_length = len(token_ids) // self.n_streams
        if self.stream_length < 2:
            raise UserInputError(f"{len(token_ids)} tokens are too few for {self.n_streams} streams "
                                 f"(batch size {batch_size} x {world_size} processes) of at least 2 tokens")
        self.token_ids = token_ids  # a tensor, or anything sliced as one (a token store's stream)
        self.n_segments = -(-(self.stream_length - 1) // segment_length)  # ceil: the last one may be shorter

    @property
    def tokens_predicted(self) -> int:
        return self.n_streams * (self.stream_length - 1)

    def __len__(self):
        return self.n_segments * self.batch_size * self.world_size

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(index)
        global_batch, row = divmod(index, self.batch_size)
        segment, rank = divmod(global_batch, self.world_size)
        stream_start = (rank * self.batch_size + row) * self.stream_length
        start = segment * self.segment_length
        end = min(start + self.segment_length, self.stream_length - 1)
        tokens = self.token_ids[stream_start + start:stream_start + end + 1]
        return {"input_ids": tokens[:-1], "shift_labels": tokens[1:]}
