"""Chinese spelling-correction (CSC) pairs: real confusion sets, a seeded corrupter, readers of pair files, encoding.

The confusion sets are pycorrector's (Apache-2.0, the ``zh`` extra installs its wheel; only its data files are read,
the package is never imported): ``same_pinyin.txt`` (characters of the same sound, same tone then other tones) and
``same_stroke.txt`` (characters of similar shape). A corrupted sentence keeps its length: one Chinese character is
swapped for one Chinese character, so source and target align character by character, as MacBERT4CSC needs.
"""

import importlib.util
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset

from hf_plm_ext.errors import UserInputError
from hf_plm_ext.files import read_utf8
from hf_plm_ext.modeling.macbert.pipeline_spelling_correction import is_chinese_character

SENTENCE_ENDS = "。！？；!?;"


def pycorrector_data_dir() -> Path:
    spec = importlib.util.find_spec("pycorrector")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise UserInputError("the confusion sets are pycorrector's data files: pip install 'hf-plm-ext[zh]' "
                             "(or pass your own with ConfusionSet.from_files)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise UserInputError(f"confusion set {path} not found")
    return read_utf8(path).splitlines()


@dataclass
class ConfusionSet:
    """``same_sound[c]`` / ``same_shape[c]``: the characters a writer confuses with ``c`` by sound / by shape."""

    same_sound: dict[str, list[str]]
    same_shape: dict[str, list[str]]

    @classmethod
    def from_files(cls, same_pinyin: str | Path, same_stroke: str | Path) -> "ConfusionSet":
        """pycorrector's formats: ``same_pinyin.txt`` lines ``char<TAB>same tone<TAB>other tones`` (``#`` comments);
        ``same_stroke.txt`` lines of tab-separated characters that look alike (every one confusable with the
        others)."""
        same_sound = {}
        for line in _read_lines(Path(same_pinyin)):
            parts = line.split("\t")
            if line.startswith("#") or len(parts) < 2 or not is_chinese_character(parts[0][:1]):
                continue
            char = parts[0]
            same_sound[char] = _unique(c for c in "".join(parts[1:]) if is_chinese_character(c) and c != char)
        same_shape: dict[str, list[str]] = {}
        for line in _read_lines(Path(same_stroke)):
            group = [c for c in line.split("\t") if len(c) == 1 and is_chinese_character(c)]
            for char in group:
                same_shape[char] = _unique([*same_shape.get(char, []), *(c for c in group if c != char)])
        return cls({c: v for c, v in same_sound.items() if v}, {c: v for c, v in same_shape.items() if v})

    @classmethod
    def from_pycorrector(cls) -> "ConfusionSet":
        data = pycorrector_data_dir()
        return cls.from_files(data / "same_pinyin.txt", data / "same_stroke.txt")

    def restricted_to(self, characters) -> "ConfusionSet":
        """Only characters in ``characters`` (e.g. a tokenizer's vocabulary), as the confused and the confusion."""
        allowed = set(characters)

        def keep(table):
            kept = {c: [x for x in v if x in allowed] for c, v in table.items() if c in allowed}
            return {c: v for c, v in kept.items() if v}

        return ConfusionSet(keep(self.same_sound), keep(self.same_shape))

    def confusable(self, char: str) -> bool:
        return char in self.same_sound or char in self.same_shape


def _unique(chars) -> list[str]:
    return list(dict.fromkeys(chars))


@dataclass
class SpellingErrorGenerator:
    """Misspells sentences as SIGHAN's writers do: a sentence stays clean with ``clean_fraction``; otherwise it gets
    ``k`` errors with probability ``error_counts[k]`` (default: SIGHAN-15 test's erroneous sentences, 78 % one
    error, 17 % two, 5 % three or more); each error replaces one confusable Chinese character by a same-sound one
    with ``same_sound_probability`` (phonological errors dominate in SIGHAN), else a same-shape one (each falls
    back on the other table where the character has no entry)."""

    confusion: ConfusionSet
    clean_fraction: float = 0.3
    error_counts: dict[int, float] = field(default_factory=lambda: {1: 0.78, 2: 0.17, 3: 0.05})
    same_sound_probability: float = 0.7

    def __post_init__(self):
        if not 0.0 <= self.clean_fraction <= 1.0:
            raise ValueError(f"clean_fraction must be in [0, 1], got {self.clean_fraction}")
        if not 0.0 <= self.same_sound_probability <= 1.0:
            raise ValueError(f"same_sound_probability must be in [0, 1], got {self.same_sound_probability}")
        if not self.error_counts or any(k < 1 or p < 0 for k, p in self.error_counts.items()) \
                or sum(self.error_counts.values()) <= 0:
            raise ValueError(f"error_counts must map error counts >= 1 to weights >= 0, got {self.error_counts}")

    def corrupt(self, sentence: str, rng: random.Random) -> str:
        """``sentence`` with its errors: the same length, only confusable Chinese characters changed."""
        positions = [i for i, c in enumerate(sentence) if self.confusion.confusable(c)]
        if not positions or rng.random() < self.clean_fraction:
            return sentence
        count = rng.choices(list(self.error_counts), weights=list(self.error_counts.values()))[0]
        chars = list(sentence)
        for position in rng.sample(positions, min(count, len(positions))):
            chars[position] = self._confuse(chars[position], rng)
        return "".join(chars)

    def _confuse(self, char: str, rng: random.Random) -> str:
        sound, shape = self.confusion.same_sound.get(char), self.confusion.same_shape.get(char)
        first, second = (sound, shape) if rng.random() < self.same_sound_probability else (shape, sound)
        return rng.choice(first or second)


def build_spelling_pairs(sentences, generator: SpellingErrorGenerator, seed: int = 42,
                         batch_size: int = 1000) -> Dataset:
    """``Dataset(source, target)``: each clean sentence (``target``) and its misspelt copy (``source``), made by a
    batched ``datasets.map``; example ``i``'s errors depend only on ``(seed, i)``, not on the batching."""
    dataset = sentences if isinstance(sentences, Dataset) else Dataset.from_dict({"target": list(sentences)})
    if "target" not in dataset.column_names:
        dataset = dataset.rename_column(dataset.column_names[0], "target")

    def corrupt(batch, indices):
        return {"source": [generator.corrupt(text, random.Random(seed * 1_000_003 + index))
                           for text, index in zip(batch["target"], indices)]}

    return dataset.map(corrupt, batched=True, batch_size=batch_size, with_indices=True,
                       desc="misspelling sentences").select_columns(["source", "target"])


def read_clean_sentences(paths, min_length: int = 8, max_length: int = 128, chinese_share: float = 0.6) -> list[str]:
    """Sentences of UTF-8 text files: lines cut after sentence-ending punctuation, kept when ``min_length`` to
    ``max_length`` characters long and at least ``chinese_share`` Chinese characters."""
    sentences = []
    for path in map(Path, paths):
        if not path.is_file():
            raise UserInputError(f"--corpus {path} not found")
        for line in read_utf8(path).splitlines():
            sentence = ""
            for char in line.strip():
                sentence += char
                if char in SENTENCE_ENDS:
                    sentences.append(sentence.strip())
                    sentence = ""
            sentences.append(sentence.strip())
    return [s for s in sentences if min_length <= len(s) <= max_length
            and sum(map(is_chinese_character, s)) >= chinese_share * len(s)]


def read_spelling_pairs(path) -> Dataset:
    """``Dataset(source, target)`` from a ``source<TAB>target`` file (``#`` comments), a SIGHAN-style JSON array
    (pycorrector's: ``original_text`` / ``correct_text`` per record) or JSON lines of the same records. Every pair
    is checked: no empty text, source and target of one length (the error names the file and line)."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"{path} not found")
    text = read_utf8(path)
    if path.suffix in (".json", ".jsonl") or text.lstrip().startswith(("[", "{")):
        records = _json_records(path, text)
        pairs = [(line, _field(path, line, record, "original_text"), _field(path, line, record, "correct_text"))
                 for line, record in records]
    else:
        pairs = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise UserInputError(f"{path}:{number}: expected source<TAB>target, got {len(parts)} field(s)")
            pairs.append((number, parts[0], parts[1]))
    for number, source, target in pairs:
        if not source.strip() or not target.strip():
            raise UserInputError(f"{path}:{number}: empty {'source' if not source.strip() else 'target'} text")
        if len(source) != len(target):
            raise UserInputError(f"{path}:{number}: source and target differ in length ({len(source)} vs "
                                 f"{len(target)} characters); spelling correction pairs align character by "
                                 "character")
    if not pairs:
        raise UserInputError(f"{path}: no pairs")
    return Dataset.from_dict({"source": [s for _, s, _ in pairs], "target": [t for _, _, t in pairs]})


def _json_records(path: Path, text: str) -> list[tuple[int, dict]]:
    """``(line, record)`` for each record of a JSON array or JSON-lines file."""
    decoder, records = json.JSONDecoder(), []
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            position = text.index("[") + 1
            while True:
                while position < len(text) and text[position] in " \t\r\n,":
                    position += 1
                if position >= len(text) or text[position] == "]":
                    break
                record, end = decoder.raw_decode(text, position)
                records.append((text.count("\n", 0, position) + 1, record))
                position = end
        else:
            for number, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    records.append((number, json.loads(line)))
    except json.JSONDecodeError as err:
        raise UserInputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    return records


def _field(path, line, record, name) -> str:
    if not isinstance(record, dict) or not isinstance(record.get(name), str):
        raise UserInputError(f"{path}:{line}: a record needs the text field {name!r} (SIGHAN-style JSON: "
                             "original_text, correct_text)")
    return record[name]


def encode_spelling_pairs(pairs: Dataset, tokenizer, max_seq_length: int = 128) -> Dataset:
    """Tokenised pairs: the source as ``input_ids`` (+ masks), the target's ids as ``labels`` (MacBERT4CSC's
    correction targets; the model derives the detection labels from where the two differ). A pair whose two
    sides tokenise to different lengths is refused (it happens only when they differ outside Chinese
    characters)."""

    def encode(batch, indices):
        sources = tokenizer(batch["source"], truncation=True, max_length=max_seq_length)
        targets = tokenizer(batch["target"], truncation=True, max_length=max_seq_length)["input_ids"]
        for index, source, source_ids, target_ids in zip(indices, batch["source"], sources["input_ids"], targets):
            if len(source_ids) != len(target_ids):
                raise UserInputError(f"pair {index + 1} ({source!r}): source and "
                                     "target tokenise to different lengths; they may differ only in Chinese "
                                     "characters, one for one")
        return {**sources, "labels": targets}

    return pairs.map(encode, batched=True, with_indices=True, remove_columns=pairs.column_names,
                     desc="tokenising pairs")
