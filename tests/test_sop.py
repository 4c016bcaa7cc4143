from datasets import Dataset, load_dataset
from transformers import AutoTokenizer

from hf_plm_ext.data.correction_masking import jieba_spans
from hf_plm_ext.data.sop import build_sop_pairs, split_sentences


def _pairs(documents, tokenizer, **kwargs):
    dataset = Dataset.from_dict({"text": documents})
    return dataset.map(build_sop_pairs, batched=True, with_indices=True, remove_columns=["text"],
                       fn_kwargs={"tokenizer": tokenizer, **kwargs})


def _position(needle, haystack):
    text, pattern = " " + " ".join(map(str, haystack)) + " ", " " + " ".join(map(str, needle)) + " "
    return text.find(pattern)


def test_sentence_splitting_handles_chinese_and_english():
    assert split_sentences("我爱北京。天安门很大！Hello there. How are you?\n新行") == [
        "我爱北京。", "天安门很大！", "Hello there.", "How are you?", "新行"]


def test_pairs_are_contiguous_ordered_segments_of_one_document(english_tokenizer_dir, shared_data):
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    documents = load_dataset("text", data_files=str(shared_data / "corpus/en/gutenberg/11-0.txt"),
                             sample_by="paragraph")["train"]["text"][20:220]
    documents = [d for d in documents if len(split_sentences(d)) >= 2]
    pairs = _pairs(documents, tokenizer, max_length=64, seed=0)
    assert len(pairs) > 100
    assert 0.4 < sum(pairs["sentence_order_label"]) / len(pairs) < 0.6
    whole = [tokenizer(" ".join(split_sentences(d)), add_special_tokens=False)["input_ids"] for d in documents]
    checked = 0
    for ids, types, label in zip(pairs["input_ids"], pairs["token_type_ids"], pairs["sentence_order_label"]):
        assert len(ids) <= 64 and ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        first_sep = ids.index(tokenizer.sep_token_id)
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        first, second = ids[1:first_sep], ids[first_sep + 1:-1]
        assert first and second
        if min(len(first), len(second)) < 8:
            continue  # short segments ("said Alice.") recur; only long ones locate themselves uniquely
        for document in whole:
            a, b = _position(first, document), _position(second, document)
            if a >= 0 and b >= 0:
                assert (a < b) == (label == 0)  # label 1: the segments were swapped
                checked += 1
                break
    assert checked > 0.5 * len(pairs)


def test_short_targets_single_sentences_and_seed(english_tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    long_document = " ".join(f"Sentence number {i} says something about the rabbit." for i in range(300))
    lengths = [len(ids) for ids in _pairs([long_document], tokenizer, max_length=64, seed=1)["input_ids"]]
    assert max(lengths) == 64 and sum(length < 40 for length in lengths) >= 1  # short_seq_prob = 0.1
    none_short = _pairs([long_document], tokenizer, max_length=64, seed=1, short_seq_prob=0.0)["input_ids"]
    assert all(len(ids) >= 50 for ids in none_short[:-1])
    single = _pairs(["Alice sat on the bank with nothing to do"], tokenizer, max_length=64)
    assert len(single) == 1  # one sentence: split at a word boundary into A and B
    assert _pairs(["Alice"], tokenizer, max_length=64).num_rows == 0  # one word: no pair
    again = _pairs([long_document], tokenizer, max_length=64, seed=1)
    assert again["input_ids"] == _pairs([long_document], tokenizer, max_length=64, seed=1)["input_ids"]
    assert again["input_ids"] != _pairs([long_document], tokenizer, max_length=64, seed=2)["input_ids"]


def test_chinese_documents_with_word_ids(shared_data):
    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    tokenizer = train_tokenizer([str(shared_data / "corpus/zh/zhwiki_bert_sampled.txt")], vocab_size=6000)
    documents = load_dataset("text", data_files=str(shared_data / "corpus/zh/zhwiki_bert_sampled.txt"),
                             sample_by="paragraph")["train"]["text"][:100]
    pairs = _pairs(documents, tokenizer, max_length=128, segmenter=jieba_spans)
    assert len(pairs) > 50
    multi_token_words = 0
    for ids, words in zip(pairs["input_ids"], pairs["word_ids"]):
        assert len(ids) == len(words) <= 128
        specials = [i for i, t in enumerate(ids) if t in (tokenizer.cls_token_id, tokenizer.sep_token_id)]
        assert all(words[i] == -1 for i in specials)
        real = [w for w in words if w >= 0]
        assert real == sorted(real)  # numbered in order of appearance
        multi_token_words += len(real) - len(set(real))
    assert multi_token_words > 500  # jieba words group several characters
