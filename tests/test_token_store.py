"""``corpus prepare`` and ``pretrain --data`` (issue 67): a corpus tokenised once on datatrove's executors into a
token store, read back by the objectives, resumed exactly."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

from hf_plm_ext.data.token_store.format import TokenStore
from hf_plm_ext.data.token_store.sources import Piece, pieces_of, read_piece

TINY = "hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=37"


def gutenberg(shared_data, name="11-0.txt"):
    return shared_data / "corpus/en/gutenberg" / name


def prepare(capsys, corpus, tokenizer, output, *extra):
    return run_cli(["corpus", "prepare", "--corpus", *([corpus] if not isinstance(corpus, list) else corpus),
                    "--tokenizer", tokenizer, "--output", output, *extra], capsys)


@pytest.mark.parametrize("documents", ["lines", "paragraphs"])
@pytest.mark.parametrize("piece_bytes", [997, 20_000, 10 ** 9])
def test_pieces_cut_anywhere_read_every_document_once_and_whole(documents, piece_bytes, shared_data, tmp_path):
    """A plain-text file cut at any byte offsets gives the same documents, in order, as read whole; CRLF, a last
    line without a newline and runs of blank lines included."""
    text = gutenberg(shared_data).read_bytes()[:60_000] + b"\r\n\r\n\r\nlast paragraph\r\nwithout an end"
    path = tmp_path / "book.txt"
    path.write_bytes(text)
    whole = list(read_piece(Piece(str(path), "text"), documents, "text"))
    cut = [doc for piece in pieces_of([path], piece_bytes) for doc in read_piece(piece, documents, "text")]
    assert cut == whole and len(pieces_of([path], piece_bytes)) == -(-len(text) // piece_bytes)
    lines = [line for line in text.decode().splitlines() if line.strip()]
    if documents == "lines":
        assert whole == lines
    else:
        paragraphs = [p.strip("\r\n") for p in text.decode().replace("\r\n", "\n").split("\n\n") if p.strip()]
        assert whole == paragraphs and whole[-1] == "last paragraph\nwithout an end"


def documents_as_the_tokenizer_reads_them(tokenizer_dir, texts):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    return [e for e in tokenizer.encode_batch(texts, add_special_tokens=False) if e.ids]


def store_documents(store: TokenStore) -> list[np.ndarray]:
    documents = []
    for shard in store.shards:
        starts = np.concatenate([[0], shard.document_ends[:-1]])
        documents += [np.asarray(shard.ids[a:b]) for a, b in zip(starts, shard.document_ends)]
    return documents


def test_a_store_holds_each_document_s_ids_and_the_sentence_and_word_starts_of_the_text_path(
        tmp_path, shared_data, english_tokenizer_dir, capsys):
    from transformers import AutoTokenizer

    from hf_plm_ext.data.correction_masking import add_word_ids
    from hf_plm_ext.data.sop import split_sentences

    corpus = gutenberg(shared_data)
    code, stdout, stderr = prepare(capsys, corpus, english_tokenizer_dir, tmp_path / "store", "--sentences",
                                   "--words", "--documents", "paragraphs")
    assert code == 0, stderr[-2000:]
    store = TokenStore(tmp_path / "store", english_tokenizer_dir, needs=("sentences", "words"))
    texts = list(read_piece(Piece(str(corpus), "text"), "paragraphs", "text"))
    expected = documents_as_the_tokenizer_reads_them(english_tokenizer_dir, texts)
    stored = store_documents(store)
    assert [list(d) for d in stored] == [e.ids for e in expected]
    assert store.dtype == np.uint16 and store.num_tokens == sum(len(e.ids) for e in expected)
    assert f"{store.num_tokens:,} tokens in {len(expected):,} documents" in stdout
    # bytes per token: ids, an 8-byte end per document, two bits
    size = sum(f.stat().st_size for f in (tmp_path / "store").iterdir() if f.name != "store.json")
    assert size == store.num_tokens * 2 + len(expected) * 8 + 2 * ((store.num_tokens + 7) // 8)

    # sentences and words, as the text path finds them in the first documents
    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    shard = store.shards[0]
    sentence_bits = np.unpackbits(shard.starts("sentences"))[:shard.tokens].astype(bool)
    word_bits = np.unpackbits(shard.starts("words"))[:shard.tokens].astype(bool)
    start = 0
    for text, document in zip(texts[:40], stored[:40]):
        stop = start + len(document)
        sentences = [s for s in split_sentences(text)
                     if tokenizer(s, add_special_tokens=False)["input_ids"]]
        assert sentence_bits[start:stop].sum() == len(sentences), text
        words = add_word_ids({"text": [text]}, tokenizer, add_special_tokens=False, max_length=10 ** 6)["word_ids"][0]
        assert word_bits[start:stop].sum() == len(set(words)), text
        start = stop


def test_records_files_folders_and_globs_and_any_number_of_workers_give_the_same_store(
        tmp_path, shared_data, english_tokenizer_dir, capsys):
    """.jsonl, .jsonl.gz and .parquet hold the text path's lines as records; 1 or 2 workers, the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = [line for line in gutenberg(shared_data).read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    folder = tmp_path / "records"
    folder.mkdir()
    thirds = [lines[:1000], lines[1000:2000], lines[2000:]]
    (folder / "a.jsonl").write_text("".join(json.dumps({"body": t, "n": i}) + "\n" for i, t in enumerate(thirds[0])))
    with gzip.open(folder / "b.jsonl.gz", "wt", encoding="utf-8") as stream:
        stream.writelines(json.dumps({"body": t}) + "\n" for t in thirds[1])
    pq.write_table(pa.table({"body": thirds[2]}), folder / "c.parquet")
    stores = {}
    for workers in (1, 2):
        out = tmp_path / f"store-{workers}"
        code, _, stderr = prepare(capsys, [str(folder / "*.jsonl"), folder / "b.jsonl.gz", folder / "c.parquet"],
                                  english_tokenizer_dir, out, "--text-field", "body", "--workers", workers)
        assert code == 0, stderr[-2000:]
        stores[workers] = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "store.json"}
    assert stores[1] == stores[2] and len([n for n in stores[1] if n.endswith(".ds")]) == 3
    store = TokenStore(tmp_path / "store-2", english_tokenizer_dir)
    expected = documents_as_the_tokenizer_reads_them(english_tokenizer_dir, lines)
    assert [list(d) for d in store_documents(store)] == [e.ids for e in expected]
    manifest = json.loads((tmp_path / "store-2" / "store.json").read_text())
    assert manifest["boundaries"] == ["documents"] and manifest["tasks"] == 3
    assert [Path(s["path"]).name for s in manifest["sources"]] == ["a.jsonl", "b.jsonl.gz", "c.parquet"]


def test_a_failed_task_reruns_alone_and_the_store_appears_only_when_complete(tmp_path, shared_data,
                                                                            english_tokenizer_dir):
    """The last of 3 tasks fails; the rerun of the same command runs it alone."""
    corpus = [gutenberg(shared_data, name) for name in ("11-0.txt", "84-0.txt", "1661-0.txt")]
    out = tmp_path / "store"
    failing = tmp_path / "failing.py"
    failing.write_text(
        "import sys\n"
        "from hf_plm_ext.data.token_store import steps\n"
        "write = steps.WriteShard.run\n"
        "def run(self, data, rank=0, world_size=1):\n"
        "    if rank == 2:\n"
        "        raise RuntimeError('task 2 dies')\n"
        "    yield from write(self, data, rank, world_size)\n"
        "steps.WriteShard.run = run\n"
        "from hf_plm_ext_cli.main import main\n"
        "main(sys.argv[1:])\n")
    argv = ["corpus", "prepare", "--corpus", *map(str, corpus), "--tokenizer", str(english_tokenizer_dir),
            "--output", str(out)]
    failed = subprocess.run([sys.executable, str(failing), *argv], capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2 and not out.exists()
    assert failed.stderr.strip().splitlines()[-1].startswith("hf-plm-ext corpus prepare: error: task 2 failed")
    staging = tmp_path / ".store.staging"
    assert sorted(p.name for p in (staging / "logs" / "completions").iterdir()) == ["00000", "00001"]
    before = {name: (staging / name).stat().st_mtime_ns for name in ("00000.ds", "00001.ds")}
    rerun = subprocess.run([sys.executable, "-m", "hf_plm_ext_cli", *argv], capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "continuing: 2 done before" in rerun.stdout
    assert {name: (out / name).stat().st_mtime_ns for name in before} == before  # not written again
    assert not staging.exists() and TokenStore(out, english_tokenizer_dir).num_documents > 0
    # a rerun with other settings does not mix into a stopped one
    (tmp_path / ".other.staging").mkdir()
    (tmp_path / ".other.staging" / "settings.json").write_text("{}")
    code = subprocess.run([sys.executable, "-m", "hf_plm_ext_cli", *argv[:-1], str(tmp_path / "other")],
                          capture_output=True, text=True, timeout=300)
    assert code.returncode == 2 and "holds a stopped `corpus prepare` of other settings" in code.stderr


@pytest.mark.parametrize("case", ["empty", "blank lines only", "latin-1", "missing", "bad json line",
                                  "no text field", "not parquet", "exists", "workers 0", "no tokenizer.json"])
def test_bad_corpus_input_is_one_line_exit_2_and_nothing_written(case, tmp_path, english_tokenizer_dir, capsys):
    corpus, extra, tokenizer = tmp_path / "corpus.txt", [], english_tokenizer_dir
    corpus.write_text("Some text.\n")
    expected = {
        "empty": "is empty", "blank lines only": "an empty corpus", "latin-1": "not UTF-8 text (invalid continuation "
        "byte at byte 8)", "missing": "no such file or folder", "bad json line": "corpus.jsonl:2: not JSON",
        "no text field": "corpus.jsonl:1: no string field 'text'", "not parquet": "not a readable Parquet file",
        "exists": "already exists", "workers 0": "must be at least 1", "no tokenizer.json": "has no tokenizer.json",
    }[case]
    if case == "empty":
        corpus.write_text("")
    elif case == "blank lines only":
        corpus.write_text("\n  \n\n")
    elif case == "latin-1":
        corpus.write_bytes("Some caf\xe9 text\n".encode("latin-1"))
    elif case == "missing":
        corpus = tmp_path / "nope.txt"
    elif case in ("bad json line", "no text field"):
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text('{"text": "a"}\n{"text": \n' if case == "bad json line" else '{"body": "a"}\n')
    elif case == "not parquet":
        corpus = tmp_path / "corpus.parquet"
        corpus.write_bytes(b"PAR1 not really")
    elif case == "exists":
        (tmp_path / "store").mkdir()
    elif case == "workers 0":
        extra = ["--workers", "0"]
    else:
        tokenizer = tmp_path
    code, _, stderr = prepare(capsys, corpus, tokenizer, tmp_path / "store", *extra)
    assert code == 2 and expected in stderr.strip().splitlines()[-1], stderr[-2000:]
    assert "Traceback" not in stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not (tmp_path / "store").exists() or case == "exists"
    assert not any(name.startswith(".store") for name in left), left


def test_an_executor_whose_package_is_missing_names_the_extra(tmp_path, english_tokenizer_dir, capsys, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Some text.\n")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    code, _, stderr = prepare(capsys, corpus, english_tokenizer_dir, tmp_path / "store", "--executor", "ray")
    assert code == 2 and "--executor ray needs ray, which is not installed: pip install 'hf-plm-ext[ray]'" in stderr
    monkeypatch.setitem(sys.modules, "datatrove", None)
    code, _, stderr = prepare(capsys, corpus, english_tokenizer_dir, tmp_path / "store")
    assert code == 2 and "pip install 'hf-plm-ext[corpus]'" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]


def test_slurm_submits_a_job_array_of_the_tasks_then_a_job_that_finishes_the_store(tmp_path, shared_data,
                                                                                     english_tokenizer_dir, capsys,
                                                                                     monkeypatch):
    """No Slurm here: the job scripts datatrove would hand to sbatch are captured."""
    import datatrove.executor.slurm as slurm

    scripts = []

    def sbatch(contents, *args):
        scripts.append((contents, args))
        return str(1000 + len(scripts))

    monkeypatch.setattr(slurm, "launch_slurm_job", sbatch)
    corpus = [gutenberg(shared_data, name) for name in ("11-0.txt", "84-0.txt")]
    code, stdout, stderr = prepare(capsys, corpus, english_tokenizer_dir, tmp_path / "store", "--executor", "slurm",
                                   "--slurm-partition", "cpu", "--slurm-time", "1:00:00", "--workers", 2)
    assert code == 0, stderr[-2000:]
    assert "submitted to Slurm" in stdout and not (tmp_path / "store").exists()
    (tokenise, _), (finish, finish_args) = [entry for entry in scripts if "launch_pickled_pipeline" in entry[0]]
    assert "#SBATCH --array=0-1%2" in tokenise and "#SBATCH --partition=cpu" in tokenise, tokenise
    assert "#SBATCH --time=1:00:00" in tokenise
    assert "#SBATCH --array=0-0" in finish and "--dependency=afterok:1001" in finish_args, finish_args
    # what the array's tasks and then the finishing job do, run here in turn
    import dill

    monkeypatch.setenv("SLURM_NODELIST", "localhost")
    monkeypatch.setattr(slurm, "expand_slurm_nodelist", lambda nodes: [nodes])  # (scontrol's job)
    staging = tmp_path / ".store.staging"
    executor = dill.loads((staging / "logs" / "executor.pik").read_bytes())
    for rank in range(2):
        executor._run_for_rank(rank)
    finisher = dill.loads((tmp_path / ".store.finish-logs" / "executor.pik").read_bytes())
    finisher._run_for_rank(0)
    assert TokenStore(tmp_path / "store", english_tokenizer_dir).num_documents > 0


def test_a_store_is_checked_when_it_is_read(tmp_path, shared_data, english_tokenizer_dir, capsys):
    from hf_plm_ext.data.tokenizer_training import train_tokenizer
    from hf_plm_ext.errors import UserInputError

    code, _, stderr = prepare(capsys, gutenberg(shared_data), english_tokenizer_dir, tmp_path / "store")
    assert code == 0, stderr
    other = tmp_path / "other-tokenizer"
    train_tokenizer([str(gutenberg(shared_data))], "wordpiece", vocab_size=900).save_pretrained(str(other))
    with pytest.raises(UserInputError, match="was tokenised with another tokenizer"):
        TokenStore(tmp_path / "store", other)
    with pytest.raises(UserInputError, match=r"records no sentences boundaries.*corpus prepare ... --sentences"):
        TokenStore(tmp_path / "store", needs=("sentences",))
    shard = tmp_path / "store" / "00000.ds"
    shard.write_bytes(shard.read_bytes()[:-10])  # cut
    with pytest.raises(UserInputError, match=r"00000.ds holds \d+ bytes, \d+ expected \(cut or damaged"):
        TokenStore(tmp_path / "store")
    (tmp_path / "store" / "store.json").write_text('{"format": "hf-plm-ext token store", "vers')
    with pytest.raises(UserInputError, match="store.json: damaged"):
        TokenStore(tmp_path / "store")


# ----------------------------------------------------------------------------------------------- pretrain --data


@pytest.fixture(scope="module")
def book_store(tmp_path_factory, shared_data, english_tokenizer_dir):
    from hf_plm_ext.data.token_store.prepare import prepare_corpus

    out = tmp_path_factory.mktemp("stores") / "books"
    args = type("Args", (), dict(corpus=[str(gutenberg(shared_data, n)) for n in ("11-0.txt", "84-0.txt")],
                                 tokenizer=str(english_tokenizer_dir), output=str(out), workers=2, executor="local",
                                 documents="lines", text_field="text", sentences=False, words=False, segmenter=None,
                                 piece_megabytes=None, slurm_partition=None, slurm_time=None))()
    prepare_corpus(args, progress=lambda line: None)
    return out


def pretrain_losses(capsys, objective, store, tokenizer, out, *extra, stop_at_call=None):
    """Run ``pretrain OBJECTIVE --data``; ``(code, stderr, [(global step, loss) of each training step]))``."""
    from unittest import mock

    from hf_plm_ext.training.trainer import SubLossTrainer

    original, losses = SubLossTrainer.training_step, []

    def training_step(self, *args, **kwargs):
        if len(losses) + 1 == stop_at_call:
            raise KeyboardInterrupt
        step = self.state.global_step
        loss = original(self, *args, **kwargs)
        losses.append((step, loss.item()))
        return loss

    objective, *flags = objective.split()
    shape = ["--config_overrides", TINY] if objective in ("mlm", "macbert") else ["--size", "tiny"]
    with mock.patch("hf_plm_ext.training.trainer.SubLossTrainer.training_step", training_step):
        code, _, stderr = run_cli(["pretrain", objective, *flags, "--data", store, "--tokenizer", tokenizer, *shape,
                                   "--max_seq_length", 32, "--output", out, "--max_steps", 8, "--save_steps", 3,
                                   "--per_device_train_batch_size", 4, "--seed", 3, "--disable_tqdm", "true",
                                   "--report_to", "none", *extra], capsys)
    return code, stderr, losses


@pytest.mark.parametrize("objective, workers", [("mlm", 0), ("mlm", 2), ("electra", 0), ("rev-lsh", 0)])
def test_a_resume_from_a_store_continues_with_the_very_batches_and_masks(objective, workers, tmp_path, book_store,
                                                                        english_tokenizer_dir, capsys):
    """Stopped in step 5, resumed from checkpoint-3: the losses of steps 4 to 8 equal the uninterrupted run's, to
    the bit (masks drawn by example; the order by the sampler's seed; the model's own draws restored)."""
    extra = ["--dataloader_num_workers", workers]
    code, stderr, whole = pretrain_losses(capsys, objective, book_store, english_tokenizer_dir, tmp_path / "whole",
                                          *extra)
    assert code == 0, stderr[-3000:]
    code, stderr, _ = pretrain_losses(capsys, objective, book_store, english_tokenizer_dir, tmp_path / "cut", *extra,
                                      stop_at_call=5)
    assert code == 130 and "continue from checkpoint-3" in stderr
    code, stderr, resumed = pretrain_losses(capsys, objective, book_store, english_tokenizer_dir, tmp_path / "cut",
                                            *extra, "--resume_from_checkpoint", "last")
    assert code == 0, stderr[-3000:]
    assert [step for step, _ in whole] == list(range(8)) and resumed == whole[3:]
    results = {name: json.loads((tmp_path / name / "pretrain_results.json").read_text()) for name in ("whole", "cut")}
    assert results["cut"]["resumed_from"].endswith("checkpoint-3")
    assert results["cut"]["final_eval_loss"] == results["whole"]["final_eval_loss"]


def test_store_masks_have_bert_s_statistics_and_depend_on_the_example_and_epoch_alone(book_store,
                                                                                     english_tokenizer_dir):
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    from hf_plm_ext.data.token_blocks import block_frame
    from hf_plm_ext.data.token_store.datasets import ExampleMasking, store_blocks

    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    masking = ExampleMasking(tokenizer, 0.15, seed=0)
    data = store_blocks(book_store, tokenizer, english_tokenizer_dir, 64, 0.05, masking, *block_frame(tokenizer))
    train = data["train"]
    first = train[10]
    assert all(np.array_equal(first[k], train[10][k]) for k in first)  # the same example, the same masks
    train.set_epoch(1)
    assert not np.array_equal(first["labels"], train[10]["labels"])  # another epoch, other masks
    train.set_epoch(0)
    examples = [train[i] for i in range(600)]
    labels = np.stack([e["labels"].numpy() for e in examples])
    inputs = np.stack([e["input_ids"].numpy() for e in examples])
    selected = labels != -100
    originals = np.where(selected, labels, 0)
    # the text path's collator on the same blocks
    collated = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)(
        [{"input_ids": np.where(selected, labels, inputs)[i]} for i in range(len(examples))])
    theirs = collated["labels"].numpy() != -100
    for share_ours, share_theirs in ((selected.mean(), theirs.mean()),):
        assert abs(share_ours - share_theirs) < 0.01 and abs(share_ours - 0.15 * 62 / 64) < 0.01
    as_mask = (inputs == tokenizer.mask_token_id)[selected].mean()
    kept = (inputs == originals)[selected].mean()
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - 0.1 - 0.1 / len(tokenizer)) < 0.02
    assert not selected[:, 0].any() and not selected[:, -1].any()  # [CLS] and [SEP] never
    # held out: other blocks than training's, every 20th
    held = data["test"]
    assert {held.block_number(i) for i in range(len(held))}.isdisjoint(train.block_number(i) for i in range(len(train)))
    assert len(held) + len(train) == train.blocks


def test_pretrain_takes_corpus_or_data_one_of_the_two(tmp_path, book_store, english_tokenizer_dir, shared_data,
                                                      capsys):
    for given in ([], ["--data", book_store, "--corpus", gutenberg(shared_data)]):
        code, _, stderr = run_cli(["pretrain", "mlm", *given, "--tokenizer", english_tokenizer_dir, "--output",
                                   tmp_path / "x"], capsys)
        assert code == 2 and "give the text with --corpus FILES, or a token store with --data STORE" in stderr
    code, _, stderr = run_cli(["pretrain", "mlm", "--data", book_store, "--tokenizer", english_tokenizer_dir,
                               "--output", tmp_path / "x", "--dataloader_persistent_workers", "true",
                               "--dataloader_num_workers", 1], capsys)
    assert code == 2 and "persistent workers would keep the first epoch's masks" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_ray_executor_on_a_local_ray_instance_with_two_workers_gives_the_local_store(tmp_path, shared_data,
                                                                                         english_tokenizer_dir):
    pytest.importorskip("ray", reason="the ray extra")
    corpus = [str(gutenberg(shared_data, n)) for n in ("11-0.txt", "84-0.txt", "1661-0.txt")]
    stores = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        done = subprocess.run([sys.executable, "-m", "hf_plm_ext_cli", "corpus", "prepare", "--corpus", *corpus,
                               "--tokenizer", str(english_tokenizer_dir), "--output", str(out), "--workers", "2",
                               "--executor", executor], capture_output=True, text=True, timeout=600,
                              env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
        assert done.returncode == 0, done.stderr[-3000:]
        stores[executor] = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "store.json"}
    assert stores["ray"] == stores["local"]


# ----------------------------------------------------------------------------------------------- macbert --data


@pytest.fixture(scope="module")
def paragraph_store(tmp_path_factory, shared_data, english_tokenizer_dir):
    from hf_plm_ext.data.token_store.prepare import prepare_corpus

    out = tmp_path_factory.mktemp("stores") / "paragraphs"
    args = type("Args", (), dict(corpus=[str(gutenberg(shared_data, n)) for n in ("11-0.txt", "84-0.txt")],
                                 tokenizer=str(english_tokenizer_dir), output=str(out), workers=1, executor="local",
                                 documents="paragraphs", text_field="text", sentences=True, words=True,
                                 segmenter=None, piece_megabytes=None, slurm_partition=None, slurm_time=None))()
    prepare_corpus(args, progress=lambda line: None)
    return out


def test_sop_pairs_from_a_store_have_the_text_path_s_statistics(paragraph_store, shared_data,
                                                                english_tokenizer_dir):
    """The same books as paragraphs: the text path's build_sop_pairs and the store's pairs agree on the swap rate,
    the share of short pairs, the lengths of A and B, and the words per pair; masking (the same collator) then
    selects the same share of words."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking
    from hf_plm_ext.data.sop import build_sop_pairs
    from hf_plm_ext.data.token_store.datasets import sentence_pairs

    tokenizer = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    texts = [doc for name in ("11-0.txt", "84-0.txt")
             for doc in read_piece(Piece(str(gutenberg(shared_data, name)), "text"), "paragraphs", "text")]
    theirs = Dataset.from_dict({"text": texts}).map(
        build_sop_pairs, batched=True, with_indices=True, remove_columns=["text"],
        fn_kwargs={"tokenizer": tokenizer, "max_length": 128, "short_seq_prob": 0.1, "seed": 0})
    ours = sentence_pairs(paragraph_store, tokenizer, english_tokenizer_dir, 128, 0.1, 0, 0.05)
    mine = [ours["train"][i] for i in range(len(ours["train"]))] + [ours["test"][i] for i in range(len(ours["test"]))]

    def statistics(rows):
        lengths = np.array([len(r["input_ids"]) for r in rows])
        first = np.array([r["token_type_ids"].count(0) - 2 for r in rows])
        words = np.array([max(r["word_ids"]) + 1 for r in rows])
        return {"pairs": len(rows), "swapped": np.mean([r["sentence_order_label"] for r in rows]),
                "length": lengths.mean(), "short": np.mean(lengths < 0.5 * 128), "first": first.mean(),
                "words": words.mean(), "full": np.mean(lengths == 128)}

    a, b = statistics(list(theirs)), statistics(mine)
    assert abs(a["pairs"] - b["pairs"]) < 0.1 * a["pairs"], (a, b)
    assert abs(a["swapped"] - 0.5) < 0.03 and abs(b["swapped"] - 0.5) < 0.03, (a, b)
    for key in ("length", "first", "words"):
        assert abs(a[key] - b[key]) < 0.1 * a[key], (key, a, b)
    assert abs(a["short"] - b["short"]) < 0.05 and abs(a["full"] - b["full"]) < 0.1, (a, b)
    for row in mine[:200]:  # well formed: [CLS] A [SEP] B [SEP], words numbered from 0 in order, specials -1
        ids, types, words = row["input_ids"], row["token_type_ids"], row["word_ids"]
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id and len(ids) <= 128
        assert ids[types.count(0) - 1] == tokenizer.sep_token_id and len(types) == len(ids) == len(words)
        assert [w for w in words if w >= 0] == sorted(w for w in words if w >= 0) and words[0] == -1
    collator = DataCollatorForCorrectionMasking(tokenizer, mode="mask", word_mask_prob=0.15, seed=0)
    masked = {}
    for name, rows in (("theirs", list(theirs)[:400]), ("ours", mine[:400])):
        batch = collator([{k: v for k, v in r.items() if k != "sentence_order_label"} for r in rows])
        masked[name] = ((batch["labels"] != -100).sum() / batch["attention_mask"].sum()).item()
    assert abs(masked["theirs"] - masked["ours"]) < 0.02, masked
    again = collator([{k: v for k, v in r.items() if k != "sentence_order_label"} for r in mine[:8]])
    once = collator([{k: v for k, v in r.items() if k != "sentence_order_label"} for r in mine[:8]])
    assert again["input_ids"].equal(once["input_ids"])  # an example's masks come from its own seed


def test_macbert_from_a_store_resumes_exactly_and_refuses_a_store_without_its_boundaries(
        tmp_path, paragraph_store, book_store, english_tokenizer_dir, capsys):
    code, stderr, whole = pretrain_losses(capsys, "macbert --masking mask", paragraph_store, english_tokenizer_dir,
                                          tmp_path / "whole", "--dataloader_num_workers", 2)
    assert code == 0, stderr[-3000:]
    code, _, _ = pretrain_losses(capsys, "macbert --masking mask", paragraph_store, english_tokenizer_dir,
                                 tmp_path / "cut", stop_at_call=5)
    assert code == 130
    code, stderr, resumed = pretrain_losses(capsys, "macbert --masking mask", paragraph_store, english_tokenizer_dir,
                                            tmp_path / "cut", "--resume_from_checkpoint", "last",
                                            "--dataloader_num_workers", 2)
    assert code == 0, stderr[-3000:]
    assert resumed == whole[3:]
    code, _, stderr = run_cli(["pretrain", "macbert", "--masking", "mask", "--data", book_store, "--tokenizer",
                               english_tokenizer_dir, "--output", tmp_path / "no"], capsys)
    assert code == 2 and "records no sentences boundaries" in stderr and "--sentences" in stderr
    code, _, stderr = run_cli(["pretrain", "macbert", "--masking", "mask", "--data", paragraph_store, "--segmenter",
                               "jieba", "--tokenizer", english_tokenizer_dir, "--output", tmp_path / "no"], capsys)
    assert code == 2 and "the words of --data" in stderr and "are the tokenizer's" in stderr


# ------------------------------------------------------------------------------ transfo-xl and distill general


def test_a_store_s_document_stream_is_the_text_path_s_stream_and_its_segments_the_same(book_store,
                                                                                        english_tokenizer_dir):
    import torch

    from hf_plm_ext.data.segment_streams import StreamSegments
    from hf_plm_ext.data.token_store.datasets import DocumentStream

    store = TokenStore(book_store, english_tokenizer_dir)
    end = 3
    stream = DocumentStream(store, end)
    expected = torch.tensor([t for document in store_documents(store) for t in [*document.tolist(), end]])
    assert len(stream) == len(expected) and torch.equal(stream[0:len(stream)], expected)
    for a, b in ((0, 1), (5, 900), (len(expected) - 7, len(expected)), (123_456, 123_457)):
        assert torch.equal(stream[a:b], expected[a:b]), (a, b)
    head, tail = stream.split(1000)
    assert torch.equal(tail[10:20], expected[1010:1020]) and len(head) == 1000
    # three batches of 4 streams of 16-token segments, over 2 ranks: the same items from either stream
    ours, theirs = StreamSegments(stream, 4, 16, 2), StreamSegments(expected, 4, 16, 2)
    assert len(ours) == len(theirs)
    for index in (0, 1, 7, 8, 100, len(ours) - 1):
        assert all(torch.equal(ours[index][k], theirs[index][k]) for k in ("input_ids", "shift_labels"))


def test_transfo_xl_and_distill_general_train_from_a_store(tmp_path, book_store, english_tokenizer_dir,
                                                           tiny_classifier_dir, shared_data, capsys):
    code, _, stderr = run_cli(["pretrain", "transfo-xl", "--data", book_store, "--tokenizer", english_tokenizer_dir,
                               "--size", "tiny", "--tgt_len", 16, "--mem_len", 16, "--output", tmp_path / "xl",
                               "--max_steps", 4, "--per_device_train_batch_size", 2, "--disable_tqdm", "true",
                               "--report_to", "none"], capsys)
    assert code == 0, stderr[-3000:]
    results = json.loads((tmp_path / "xl" / "pretrain_results.json").read_text())
    assert results["final_eval_perplexity"] > 1 and results["arguments"]["data"] == str(book_store)
    # distill general: the teacher's tokenizer must be the store's
    teacher = tmp_path / "teacher"
    import shutil

    shutil.copytree(tiny_classifier_dir, teacher)
    code, _, stderr = run_cli(["distill", "general", "--teacher", teacher, "--data", book_store, "--student-layers",
                               "last:1", "--max_seq_length", 32, "--output", tmp_path / "student", "--max_steps", 4,
                               "--per_device_train_batch_size", 4, "--disable_tqdm", "true", "--report_to", "none"],
                              capsys)
    assert code == 0, stderr[-3000:]
    results = json.loads((tmp_path / "student" / "distill_results.json").read_text())
    assert results["data"] == str(book_store) and results["held_out_blocks"] > 0
    code, _, stderr = run_cli(["distill", "general", "--teacher", teacher, "--corpus", gutenberg(shared_data),
                               "--data", book_store, "--output", tmp_path / "both"], capsys)
    assert code == 2 and "one of the two" in stderr


@pytest.mark.slow
def test_two_ranks_with_two_loader_workers_each_see_every_example_once_an_epoch(tmp_path, book_store,
                                                                              english_tokenizer_dir):
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           str(Path(__file__).parent / "store_coverage_worker.py"), str(book_store),
                           str(english_tokenizer_dir), str(tmp_path)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    assert all(rank["world_size"] == 2 for rank in ranks)
    seen = ranks[0]["seen"] + ranks[1]["seen"]
    everything = ranks[0]["blocks"]
    assert set(ranks[0]["seen"]).isdisjoint(ranks[1]["seen"])
    # the last uneven batch is padded by repeating from the start (accelerate's even_batches): every block at least
    # once, and none twice but those few
    assert set(seen) == set(everything)
    assert len(seen) - len(set(seen)) < 2 * 8
