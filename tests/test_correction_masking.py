import sys

import numpy as np
import pytest
import torch
from datasets import Dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking, add_word_ids, jieba_spans
from hf_plm_ext.data.similar_words import EmbeddingNeighbours, SynonymTable, cilin_synonyms
from hf_plm_ext.errors import UserInputError


@pytest.fixture(scope="module")
def tokenizer(english_tokenizer_dir):
    return AutoTokenizer.from_pretrained(english_tokenizer_dir)


@pytest.fixture(scope="module")
def zh_tokenizer(tmp_path_factory, shared_data):
    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    return train_tokenizer([str(shared_data / "corpus/zh/zhwiki_bert_sampled.txt")], vocab_size=6000)


def _features(tokenizer, texts, segmenter=None, max_length=128):
    encoded = add_word_ids({"text": texts}, tokenizer, segmenter, max_length=max_length)
    return [{k: encoded[k][i] for k in ("input_ids", "attention_mask", "word_ids")} for i in range(len(texts))]


def _selected_words(feature, labels):
    return {w for w, label in zip(feature["word_ids"], labels) if label != -100}


def check_invariants(collator, features, batch):
    special = set(collator.tokenizer.all_special_ids)
    for row, feature in enumerate(features):
        n = len(feature["input_ids"])
        labels = batch["labels"][row].tolist()
        new_ids = batch["input_ids"][row].tolist()
        words = [w for w in feature["word_ids"] if w >= 0]
        assert all(label == -100 for label in labels[n:])  # padding never selected
        for position, (original, word) in enumerate(zip(feature["input_ids"], feature["word_ids"])):
            if word < 0:
                assert labels[position] == -100 and new_ids[position] == original
                assert original in special  # only special tokens lie outside every word
            elif labels[position] == -100:
                assert new_ids[position] == original  # only selected positions change
            else:
                assert labels[position] == original
        selected = _selected_words(feature, labels)
        assert -1 not in selected
        expected = max(1, round(len(set(words)) * collator.word_mask_prob)) if words else 0
        assert len(selected) == expected
        for word in selected:  # whole words: every token of a selected word carries a label
            assert all(labels[p] != -100 for p, w in enumerate(feature["word_ids"]) if w == word)
        if collator.mode == "correction":
            assert collator.tokenizer.mask_token_id not in new_ids


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=4))
def test_invariants_on_arbitrary_text(tokenizer, texts):
    collator = DataCollatorForCorrectionMasking(tokenizer, SynonymTable([["cat", "dog"], ["said", "cried"]]), seed=1)
    features = _features(tokenizer, texts)
    check_invariants(collator, features, collator(features))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=200), min_size=1, max_size=3))
def test_invariants_on_mixed_scripts_with_jieba(zh_tokenizer, texts):
    collator = DataCollatorForCorrectionMasking(zh_tokenizer, SynonymTable([["高兴", "开心"]]), mode="mask", seed=2)
    features = _features(zh_tokenizer, texts, jieba_spans)
    check_invariants(collator, features, collator(features))


def test_real_chinese_words_come_from_jieba(zh_tokenizer, shared_data):
    lines = [l for l in (shared_data / "corpus/zh/CLUECorpusSmall_bert_sampled.txt").read_text(
        encoding="utf-8").splitlines() if 10 < len(l) < 100][:50]
    dataset = Dataset.from_dict({"text": lines}).map(
        add_word_ids, batched=True, fn_kwargs={"tokenizer": zh_tokenizer, "segmenter": jieba_spans})
    multi_character_words = 0
    for text, word_ids in zip(lines, dataset["word_ids"]):
        spans = jieba_spans(text)
        offsets = zh_tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
        span_of = [next((k for k, (a, b) in enumerate(spans) if a <= start < b), -1) if end > start else -1
                   for start, end in offsets]
        tokens = [(w, s) for w, s in zip(word_ids, span_of) if w >= 0]
        for w1, s1 in tokens:  # same word id <=> same jieba word
            for w2, s2 in tokens:
                assert (w1 == w2) == (s1 == s2)
        multi_character_words += sum(1 for w in set(word_ids) if w >= 0 and word_ids.count(w) > 1)
    assert multi_character_words > 100  # characters really are grouped into words


def test_english_words_follow_pre_tokenisation(tokenizer):
    [feature] = _features(tokenizer, ["The Mock Turtle sighed unbelievably."])
    tokens = tokenizer.convert_ids_to_tokens(feature["input_ids"])
    by_word = {}
    for token, word in zip(tokens, feature["word_ids"]):
        by_word.setdefault(word, []).append(token)
    assert by_word[-1] == ["[CLS]", "[SEP]"]
    assert "".join(by_word[4]).replace("##", "") == "unbelievably" and len(by_word[4]) > 1


def test_replacement_split_is_80_10_10_and_similar_words_keep_length(tokenizer):
    vocab = [w for w in tokenizer.get_vocab() if w.isalpha() and len(w) > 3][:300]
    similar = SynonymTable([[w, "alice"] for w in vocab if w != "alice"])
    collator = DataCollatorForCorrectionMasking(tokenizer, similar, word_mask_prob=0.5, seed=3)
    alice = tokenizer.convert_tokens_to_ids("alice")
    rng = np.random.default_rng(0)
    counts = {"similar": 0, "random": 0, "kept": 0}
    for _ in range(40):
        texts = [" ".join(rng.choice(vocab, size=40)) for _ in range(8)]
        features = _features(tokenizer, texts)
        batch = collator(features)
        check_invariants(collator, features, batch)
        for row, feature in enumerate(features):
            for original, new, label in zip(feature["input_ids"], batch["input_ids"][row].tolist(),
                                            batch["labels"][row].tolist()):
                if label == -100:
                    continue
                key = "kept" if new == original else "similar" if new == alice and original != alice else "random"
                counts[key] += 1
    total = sum(counts.values())
    assert total > 5000
    assert counts["similar"] / total == pytest.approx(0.8, abs=0.03)
    assert counts["random"] / total == pytest.approx(0.1, abs=0.03)
    assert counts["kept"] / total == pytest.approx(0.1, abs=0.03)


def test_mask_mode_and_ngrams(tokenizer):
    collator = DataCollatorForCorrectionMasking(tokenizer, mode="mask", seed=4)
    texts = ["alice was beginning to get very tired of sitting by her sister on the bank " * 3] * 16
    features = _features(tokenizer, texts)
    masked_share = []
    for _ in range(10):  # ~1,100 selected words in all: the share's standard deviation is ~0.012
        batch = collator(features)
        check_invariants(collator, features, batch)
        selected = batch["labels"] != -100
        masked_share.append(((batch["input_ids"] == tokenizer.mask_token_id) & selected).sum() / selected.sum())
    assert sum(masked_share) / len(masked_share) == pytest.approx(0.8, abs=0.05)
    runs = sum(bool(row[i] and row[i + 1]) for row in selected.tolist() for i in range(len(row) - 1))
    assert runs > 0  # N-grams of neighbouring words are selected together


def test_seeded_and_dynamic(tokenizer):
    texts = ["the queen was in a furious passion and went stamping about"] * 4
    features = _features(tokenizer, texts)
    similar = SynonymTable([["queen", "king"]])
    first = DataCollatorForCorrectionMasking(tokenizer, similar, seed=7)
    second = DataCollatorForCorrectionMasking(tokenizer, similar, seed=7)
    a, b = first(features), second(features)
    assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    again = [first(features)["labels"] for _ in range(5)]
    assert any(not torch.equal(a["labels"], labels) for labels in again)  # a new mask every call


def test_dataloader_workers_draw_different_masks(tokenizer):
    features = _features(tokenizer, ["the queen was in a furious passion and went stamping about"] * 4)
    collator = DataCollatorForCorrectionMasking(tokenizer, SynonymTable([["queen", "king"]]), seed=7)

    def labels_per_batch():
        torch.manual_seed(0)  # the Trainer seeds torch; workers' seeds derive from it
        loader = torch.utils.data.DataLoader(features, batch_size=2, num_workers=2, collate_fn=collator)
        return [batch["labels"] for batch in loader]

    first_worker, second_worker = labels_per_batch()  # identical inputs, one batch per worker
    assert not torch.equal(first_worker, second_worker)
    assert all(torch.equal(a, b) for a, b in zip(labels_per_batch(), [first_worker, second_worker]))


def test_cilin_and_synonym_table_sources(tmp_path):
    assert "开心" in cilin_synonyms()("高兴")
    table = tmp_path / "synonyms.txt"
    table.write_text("happy glad joyful\n# comment\n\nsad unhappy\n")
    assert SynonymTable.from_file(table)("glad") == ["happy", "joyful"]
    table.write_text("happy glad\nlonely\n")
    with pytest.raises(UserInputError, match=r"synonyms.txt:2: a synonym group needs at least two words"):
        SynonymTable.from_file(table)


def test_embedding_neighbours_from_minilm_are_cached(tmp_path, minilm_dir):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(minilm_dir)
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    cache = tmp_path / "neighbours.safetensors"
    neighbours = EmbeddingNeighbours.from_model(model, tok, top_k=8, cache=cache)
    assert "queen" in neighbours("king") and "movie" in neighbours("film")
    assert cache.is_file()
    reloaded = EmbeddingNeighbours(torch.zeros_like(model.get_input_embeddings().weight), tok, top_k=8, cache=cache)
    assert reloaded("king") == neighbours("king")  # read from the cache, not recomputed from zeros


def test_embedding_neighbours_default_cache_is_per_model(minilm_dir, monkeypatch):
    from transformers import AutoModel

    from hf_plm_ext.data import similar_words

    embeddings = AutoModel.from_pretrained(minilm_dir).get_input_embeddings().weight[:2000]
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    cache = similar_words.default_cache(embeddings.detach().float(), 8)
    assert not cache.exists()
    first = EmbeddingNeighbours(embeddings, tok, top_k=8)
    assert cache.is_file() and list(cache.parent.glob(".*partial*")) == []
    monkeypatch.setattr(torch.nn.functional, "normalize", None)  # a second source for the same model must not recompute
    assert torch.equal(EmbeddingNeighbours(embeddings, tok, top_k=8).neighbours, first.neighbours)
    other = embeddings.detach().clone()
    other[0] += 1.0
    assert similar_words.default_cache(other, 8) != cache  # another model, another table


def test_bad_setups_are_clear_errors(tokenizer, monkeypatch):
    with pytest.raises(ValueError, match="needs a similar_words source"):
        DataCollatorForCorrectionMasking(tokenizer)
    with pytest.raises(ValueError, match="ngram_probs"):
        DataCollatorForCorrectionMasking(tokenizer, mode="mask", ngram_probs=(0.5, 0.6))
    monkeypatch.setitem(sys.modules, "jieba", None)
    with pytest.raises(UserInputError, match=r"hf-plm-ext\[zh\]"):
        jieba_spans("我爱北京")


def test_a_tokenizer_without_offsets_is_refused():
    slow = type("SlowTokenizer", (), {"is_fast": False})()
    with pytest.raises(UserInputError, match="needs a fast tokenizer .offsets.; got SlowTokenizer"):
        add_word_ids({"text": ["hello"]}, slow)
