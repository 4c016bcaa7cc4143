"""TinyBERT's data augmentation for task distillation: copies of each training sentence with some words replaced.

Per word (not a stop-word, letters only) up to ``num_candidates`` replacements: a masked LM's top predictions for
the word masked, if it is one vocabulary token and a masked LM is given; otherwise the nearest vocabulary words by
input-embedding cosine (:class:`~hf_plm_ext.data.similar_words.EmbeddingNeighbours`; a word of several pieces is
their mean embedding). Each copy replaces each such word with probability ``replace_probability``. As TinyBERT
(``data_augmentation.py``: N = 30 copies, M = 15 candidates, p = 0.4) the original comes first, copies that repeat
are dropped, and a sentence pair augments its first sentence only. TinyBERT takes GloVe neighbours for words of
several pieces; here they come from the model's own embeddings. Chinese (CJK) characters are words of their own,
as BERT's tokenizer makes them (text without spaces would otherwise be one long "word"); the stop-words are
TinyBERT's English ones only.
"""

import hashlib
import json
import random
import re
from pathlib import Path

import torch
from datasets import Dataset
from huggingface_hub import constants

# TinyBERT's stop-word list (data_augmentation.py), which it never replaces
STOPWORDS = frozenset("""i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
she her hers herself it its itself they them their theirs themselves what which who whom this that these those am
is are was were be been being have has had having do does did doing a an the and but if or because as until while
of at by for with about against between into through during before after above below to from up down in out on off
over under again further then once here there when where why how all any both each few more most other some such
no nor not only own same so than too very s t can will just don should now""".split())


# BERT's CJK ideograph blocks (tokenization_bert._is_chinese_char): each such character one word, runs of
# anything else as the pre-tokenizer left them
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ceaf\U0002f800-\U0002fa1f"
CJK_OR_OTHER_RUN = re.compile(f"[{CJK}]|[^{CJK}]+")


class TinyBertAugmenter:
    """Replacement candidates for a sentence's words, and augmented copies of it.

    ``neighbours``: an ``EmbeddingNeighbours`` of the vocabulary (its ``words_near`` finds the words near a mean
    embedding); ``masked_lm``: optionally, a masked LM of the same vocabulary for single-piece words.
    """

    def __init__(self, tokenizer, neighbours, masked_lm=None, num_candidates=15, replace_probability=0.4,
                 copies=30, seed=0, batch_size=64):
        if not 0 <= replace_probability <= 1:
            raise ValueError(f"replace_probability must be in [0, 1], got {replace_probability}")
        if copies < 1 or num_candidates < 1:
            raise ValueError(f"copies and num_candidates must be >= 1, got {copies} and {num_candidates}")
        self.tokenizer, self.neighbours, self.masked_lm = tokenizer, neighbours, masked_lm
        self.num_candidates, self.replace_probability, self.copies = num_candidates, replace_probability, copies
        self.seed, self.batch_size = seed, batch_size

    def words(self, sentence: str) -> list[tuple[str, tuple[int, int]]]:
        """The sentence's words with their character spans (the tokenizer's own pre-tokenisation, each CJK
        character then a word of its own)."""
        words = []
        for word, (start, _) in self.tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(sentence):
            words += [(part.group(), (start + part.start(), start + part.end()))
                      for part in CJK_OR_OTHER_RUN.finditer(word)]
        return words

    def _replaceable(self, word: str) -> bool:
        return word.isalpha() and word.lower() not in STOPWORDS

    def candidates(self, sentences: list[str]) -> list[list[list[str]]]:
        """Per sentence, per word: its replacement candidates (``[]``: kept as it is)."""
        return self._candidates([self.words(sentence) for sentence in sentences])

    def _candidates(self, words) -> list[list[list[str]]]:
        found = [[[] for _ in sentence_words] for sentence_words in words]
        masked, near = [], []  # (sentence, word) whose candidates the masked LM / the embeddings give
        for s, sentence_words in enumerate(words):
            for w, (word, _) in enumerate(sentence_words):
                if not self._replaceable(word):
                    continue
                pieces = self.tokenizer.tokenize(word)
                (masked if self.masked_lm is not None and len(pieces) == 1 else near).append((s, w, pieces))
        for (s, w, _), nearest in zip(near, self.neighbours.words_near([p for *_, p in near], self.num_candidates)):
            found[s][w] = nearest
        for start in range(0, len(masked), self.batch_size):
            chunk = masked[start:start + self.batch_size]
            for (s, w, _), predicted in zip(chunk, self._masked_predictions(words, chunk)):
                found[s][w] = predicted
        return found

    @torch.no_grad()
    def _masked_predictions(self, words, chunk) -> list[list[str]]:
        texts = []
        for s, w, _ in chunk:
            texts.append([self.tokenizer.mask_token if i == w else word for i, (word, _) in enumerate(words[s])])
        device = next(self.masked_lm.parameters()).device
        encoded = self.tokenizer(texts, is_split_into_words=True, padding=True, truncation=True, max_length=512,
                                 return_tensors="pt").to(device)
        logits = self.masked_lm(**encoded).logits
        rows, positions = (encoded["input_ids"] == self.tokenizer.mask_token_id).nonzero(as_tuple=True)
        top = logits[rows, positions].topk(self.num_candidates * 3, dim=-1).indices.tolist()
        predictions = []
        for (s, w, _), ids in zip(chunk, top):
            original = words[s][w][0].lower()
            tokens = [t for t in self.tokenizer.convert_ids_to_tokens(ids) if self._replaceable(t) and t != original]
            predictions.append(tokens[:self.num_candidates])
        return predictions

    def augment(self, sentences: list[str], indices: list[int]) -> list[list[str]]:
        """Per sentence: the original, then its distinct augmented copies; example ``indices`` seed each one, so a
        sentence gets the same copies however the data is batched."""
        augmented = []
        words = [self.words(sentence) for sentence in sentences]
        for sentence, index, sentence_words, word_candidates in zip(sentences, indices, words,
                                                                    self._candidates(words)):
            rng = random.Random(f"{self.seed}-{index}")
            spans = [span for _, span in sentence_words]
            copies = [sentence]
            for _ in range(self.copies):
                replaced = [(span, rng.choice(options)) for span, options in zip(spans, word_candidates)
                            if options and rng.random() < self.replace_probability]
                copy = _replace_spans(sentence, replaced)
                if copy not in copies:
                    copies.append(copy)
            augmented.append(copies)
        return augmented


def _replace_spans(sentence, replacements) -> str:
    for (start, end), word in sorted(replacements, reverse=True):
        sentence = sentence[:start] + word + sentence[end:]
    return sentence


def augment_examples(examples, augmenter: TinyBertAugmenter, cache_key: dict, cache_dir=None) -> Dataset:
    """``examples`` (``text_a`` / ``text_b`` / ``label`` / ``line`` columns) with every row followed by its
    augmented copies (``text_a`` replaced), by a batched ``datasets.map`` with a progress bar. The result is cached
    under ``cache_dir`` (default ``$HF_HOME/hf_plm_ext/augmented``) by ``cache_key`` (what identifies the input
    data and the augmenter): a second run with the same key reads it back."""
    settings = {"copies": augmenter.copies, "num_candidates": augmenter.num_candidates,
                "replace_probability": augmenter.replace_probability, "seed": augmenter.seed,
                "masked_lm": augmenter.masked_lm is not None, **cache_key}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:20]
    cache_dir = Path(cache_dir) if cache_dir else Path(constants.HF_HOME) / "hf_plm_ext" / "augmented"
    cache_dir.mkdir(parents=True, exist_ok=True)
    dataset = Dataset.from_dict(examples.to_dict()).add_column("example", list(range(len(examples))))

    def expand(batch):
        copies = augmenter.augment(batch["text_a"], batch["example"])
        rows = {column: [] for column in batch}
        for i, sentences in enumerate(copies):
            for sentence in sentences:
                for column in batch:
                    rows[column].append(sentence if column == "text_a" else batch[column][i])
        return rows

    augmented = dataset.map(expand, batched=True, batch_size=32, desc="TinyBERT augmentation",
                            cache_file_name=str(cache_dir / f"{digest}.arrow"), load_from_cache_file=True,
                            new_fingerprint=digest)
    return augmented.remove_columns("example")
