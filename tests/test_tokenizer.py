import json
import re

import pytest
from transformers import AutoTokenizer

from hf_plm_ext.data.tokenizer_training import KINDS, LM_KINDS, SPECIAL_TOKENS, train_tokenizer

from conftest import run_cli

CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind not in LM_KINDS])
def test_cli_trains_each_kind_and_autotokenizer_reloads_it(kind, tmp_path, shared_data, capsys):
    out = tmp_path / kind
    code, stdout, stderr = run_cli(["tokenizer", "train", "--corpus", shared_data / "corpus/en/gutenberg/11-0.txt",
                                    "--kind", kind, "--vocab-size", 1200, "--output", out], capsys)
    assert code == 0, stderr
    tok = AutoTokenizer.from_pretrained(out)
    assert 200 < len(tok) <= 1200
    encoded = tok("Alice was beginning to get very tired.", "Down the rabbit-hole")
    tokens = tok.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
    first_sep = tokens.index("[SEP]")
    assert set(encoded["token_type_ids"][:first_sep + 1]) == {0}
    assert set(encoded["token_type_ids"][first_sep + 1:]) == {1}
    assert tok.mask_token == "[MASK]" and tok.pad_token_id == 0
    assert json.loads((out / "tokenizer_training.json").read_text())["kind"] == kind


@pytest.mark.parametrize("kind", LM_KINDS)
def test_language_model_kinds_keep_text_as_is_and_end_lines_with_eos(kind, tmp_path, shared_data, capsys):
    out = tmp_path / kind
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", shared_data / "corpus/en/wikitext-2/wiki.valid.tokens",
                               "--kind", kind, "--vocab-size", 50000, "--min-frequency", 1, "--no-lowercase",
                               "--output", out], capsys)
    assert code == 0, stderr
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.unk_token == "<unk>" and tok.eos_token == "<eos>" and tok.convert_tokens_to_ids("<eos>") == 1
    if kind == "words":
        text = "The Homarus gammarus <unk> , 2011 ."
        tokens = tok.convert_ids_to_tokens(tok(text)["input_ids"])  # no template: nothing added
        assert tokens == text.split()  # case kept, WikiText's own <unk> is the unknown token
        assert tok.convert_ids_to_tokens(tok("Homarus Zyzzyva")["input_ids"]) == ["Homarus", "<unk>"]
    else:
        text = "The Homarus gammarus , 2011 ."
        ids = tok(text)["input_ids"]
        assert len(ids) == len(text) and tok.decode(ids) == text


def test_chinese_wordpiece_vocabulary_is_character_level(tmp_path, shared_data, capsys):
    corpus = shared_data / "corpus/zh/zhwiki_bert_sampled.txt"
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", corpus, "--kind", "wordpiece",
                               "--vocab-size", 6000, "--output", tmp_path / "zh"], capsys)
    assert code == 0, stderr
    tok = AutoTokenizer.from_pretrained(tmp_path / "zh")
    multi_char_cjk = [t for t in tok.get_vocab() if len(CJK.findall(t)) > 1]
    assert multi_char_cjk == []
    sentences = corpus.read_text(encoding="utf-8").splitlines()[:200]
    cjk_tokens = [t for s in sentences for t in tok.tokenize(s) if CJK.search(t)]
    assert len(cjk_tokens) > 1000
    assert all(len(t) == 1 for t in cjk_tokens)  # one character each, never a "##" continuation


def test_wordpiece_training_gives_the_same_tokenizer_every_time(shared_data):
    # tokenizers' own trainer numbers the "##" pieces in hash-map order: two runs differed before the package fixed it
    corpus = [shared_data / "corpus/en/gutenberg/11-0.txt"]
    first, second = (train_tokenizer(corpus, kind="wordpiece", vocab_size=1200) for _ in range(2))
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    assert sorted(first.all_special_tokens) == sorted(SPECIAL_TOKENS.values())  # the pieces are plain vocabulary
    assert "##e" in first.get_vocab() and "##e" not in first.tokenize("Alice ##e")


def test_missing_corpus_is_one_clear_error(tmp_path, capsys):
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", tmp_path / "nope.txt",
                               "--output", tmp_path / "out"], capsys)
    assert code == 2
    assert "corpus file not found" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


def test_empty_corpus_and_existing_output_are_errors(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", empty, "--output", tmp_path / "out"], capsys)
    assert code == 2 and f"{empty} is empty" in stderr
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n")  # text, but no words
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", blank, "--output", tmp_path / "out"], capsys)
    assert code == 2 and "no vocabulary" in stderr
    assert sorted(tmp_path.iterdir()) == [blank, empty]  # nothing half-written

    (tmp_path / "taken").mkdir()
    code, _, stderr = run_cli(["tokenizer", "train", "--corpus", empty, "--output", tmp_path / "taken"], capsys)
    assert code == 2 and "already exists" in stderr


@pytest.mark.parametrize("kind,decodes_alone", [("bpe", True), ("words", True), ("chars", True), ("wordpiece", False),
                                                ("wordlevel", False), ("unigram", False)])
def test_only_kinds_whose_continuations_decode_alone_pass_the_causal_check(kind, decodes_alone, tmp_path):
    """What `pretrain --causal` checks: every split of a text decodes, in two parts, to the whole's text."""
    from importlib.resources import files

    from hf_plm_ext.data.tokenizer_training import check_continuations_decode, make_causal, train_tokenizer
    from hf_plm_ext.errors import UserInputError

    tokenizer = train_tokenizer([str(files("hf_plm_ext") / "demo_data" / "alice.txt")], kind, vocab_size=800)
    if kind not in ("words", "chars"):
        make_causal(tokenizer)
    if decodes_alone:
        check_continuations_decode(tokenizer, "tok")
    else:
        with pytest.raises(UserInputError, match="--tokenizer tok: .*continuation.*--kind bpe"):
            check_continuations_decode(tokenizer, "tok")
