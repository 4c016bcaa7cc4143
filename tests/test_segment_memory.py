"""Transformer-XL training through the stock Trainer: ordered streams, memory carried, perplexity."""

import json
import math

import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from torch.utils.data import BatchSampler, SequentialSampler
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainingArguments, default_data_collator

from hf_plm_ext import TransfoXLLMHeadModel
from hf_plm_ext.data.segment_streams import StreamSegments, tokenize_stream
from hf_plm_ext.eval.language_model import stream_perplexity
from hf_plm_ext.training.segment_memory import SegmentMemoryTrainer

from conftest import run_cli
from family_common import tiny_transfo_xl


def tiny_xl(mem_len=8, seed=0):
    torch.manual_seed(seed)
    return TransfoXLLMHeadModel(tiny_transfo_xl(vocab_size=40, mem_len=mem_len, init_std=0.3, proj_init_std=0.3))


@pytest.mark.parametrize("world_size", [1, 2])
def test_each_rank_reads_its_own_streams_in_order(world_size):
    tokens = torch.arange(1000)
    batch_size, length = 3, 7
    data = StreamSegments(tokens, batch_size, length, world_size)
    n_streams = batch_size * world_size
    stream_length = 1000 // n_streams
    predicted = []
    for rank in range(world_size):  # the sharding the Trainer's accelerator applies to a sequential loader
        batches = BatchSamplerShard(BatchSampler(SequentialSampler(data), batch_size, drop_last=False),
                                    num_processes=world_size, process_index=rank)
        previous_end = None
        for batch in batches:
            items = [data[i] for i in batch]
            starts = torch.stack([item["input_ids"][0] for item in items])
            # row r of every batch continues row r of the batch before, in this rank's own streams
            streams = (rank * batch_size + torch.arange(batch_size)) * stream_length
            if previous_end is None:
                assert torch.equal(starts, streams)
            else:
                assert torch.equal(starts, previous_end)
            for item in items:
                assert torch.equal(item["shift_labels"], item["input_ids"] + 1)  # the next tokens
                predicted.extend(item["shift_labels"].tolist())
            previous_end = torch.stack([item["input_ids"][-1] + 1 for item in items])
    # every token but each stream's first is predicted exactly once
    expected = [s * stream_length + t for s in range(n_streams) for t in range(1, stream_length)]
    assert sorted(predicted) == expected
    assert data.tokens_predicted == len(expected)


def test_memory_carries_across_micro_batches_and_equals_a_manual_loop(tmp_path):
    """Gradient accumulation 2, SGD: the Trainer's weights equal a hand-written loop that carries the memory."""
    tokens = torch.randint(0, 40, (600,), generator=torch.Generator().manual_seed(1))
    data = StreamSegments(tokens, batch_size=2, segment_length=6)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=2,
                             max_steps=4, learning_rate=0.5, optim="sgd", lr_scheduler_type="constant",
                             max_grad_norm=0.0, train_sampling_strategy="sequential", report_to="none",
                             remove_unused_columns=False,
                             use_cpu=True, save_strategy="no", label_names=["shift_labels"], logging_steps=100,
                             disable_tqdm=True)
    seen = []
    model = tiny_xl()
    original_forward = model.forward

    def recording_forward(*a, mems=None, **kw):
        seen.append(None if mems is None else mems[0].clone())
        return original_forward(*a, mems=mems, **kw)

    model.forward = recording_forward
    trainer = SegmentMemoryTrainer(model=model, args=args, train_dataset=data, data_collator=default_data_collator)
    trainer.train()
    assert seen[0] is None and all(m is not None for m in seen[1:8])

    manual = tiny_xl()
    optimizer = torch.optim.SGD(manual.parameters(), lr=0.5)
    mems = None
    for step in range(8):
        batch = default_data_collator([data[step * 2], data[step * 2 + 1]])
        outputs = manual(**batch, mems=mems)
        if step:
            torch.testing.assert_close(mems[0], seen[step])  # the Trainer fed the same memory
        mems = outputs.mems
        (outputs.loss / 2).backward()
        if step % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
    for (name, ours), theirs in zip(model.named_parameters(), manual.parameters()):
        torch.testing.assert_close(ours, theirs, msg=name)


def test_memory_restarts_for_each_epoch_and_each_evaluation(tmp_path):
    tokens = torch.randint(0, 40, (200,), generator=torch.Generator().manual_seed(2))
    train, held_out = StreamSegments(tokens[:150], 2, 6), StreamSegments(tokens[150:], 2, 6)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=2,
                             num_train_epochs=2, train_sampling_strategy="sequential", report_to="none",
                             remove_unused_columns=False,
                             use_cpu=True, save_strategy="no", label_names=["shift_labels"], eval_strategy="steps",
                             eval_steps=5, prediction_loss_only=True, disable_tqdm=True)
    model = tiny_xl()
    calls = []
    original_forward = model.forward

    def recording_forward(*a, mems=None, **kw):
        calls.append(("train" if model.training else "eval", mems is None, kw.get("mem_key_values") is not None))
        return original_forward(*a, mems=mems, **kw)

    model.forward = recording_forward
    trainer = SegmentMemoryTrainer(model=model, args=args, train_dataset=train, eval_dataset=held_out,
                                   data_collator=default_data_collator)
    trainer.train()
    assert not any(cached for mode, _, cached in calls if mode == "train")  # training recomputes keys and values
    train_calls = [empty for mode, empty, _ in calls if mode == "train"]
    per_epoch = len(train)
    assert len(train_calls) == 2 * (per_epoch // 2)
    starts = [i for i, empty in enumerate(train_calls) if empty]
    assert starts == [0, per_epoch // 2]  # empty at each epoch's start only, not after the evaluations
    eval_segments = len(held_out) // 2
    assert all(cached != empty for mode, empty, cached in calls if mode == "eval")  # the cache travels with mems
    eval_calls = [empty for mode, empty, _ in calls if mode == "eval"]
    assert len(eval_calls) % eval_segments == 0 and len(eval_calls) >= eval_segments
    for start in range(0, len(eval_calls), eval_segments):  # every evaluation starts empty, then carries
        assert eval_calls[start:start + eval_segments] == [True] + [False] * (eval_segments - 1)


def test_trainer_refuses_reordered_batches_and_predicts_from_an_empty_memory(tmp_path):
    tokens = torch.randint(0, 40, (200,), generator=torch.Generator().manual_seed(5))
    train, held_out = StreamSegments(tokens[:150], 2, 6), StreamSegments(tokens[150:], 2, 6)
    options = dict(output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=2,
                   report_to="none", remove_unused_columns=False, use_cpu=True, save_strategy="no",
                   label_names=["shift_labels"], prediction_loss_only=True, disable_tqdm=True)
    with pytest.raises(ValueError, match="train_sampling_strategy='sequential'"):  # the Trainer's default: random
        SegmentMemoryTrainer(model=tiny_xl(), args=TrainingArguments(**options), train_dataset=train,
                             data_collator=default_data_collator)
    args = TrainingArguments(**options, train_sampling_strategy="sequential")
    trainer = SegmentMemoryTrainer(model=tiny_xl(), args=args, train_dataset=train, data_collator=default_data_collator)
    first, second = (trainer.predict(held_out).metrics["test_loss"] for _ in range(2))
    assert first == second  # the second prediction does not continue the first one's memory
    assert trainer.evaluate(held_out)["eval_loss"] == first
    # by default label_names are the forward's labels and shift_labels; a batch without labels would be evaluated
    # by calling the model directly, without memory
    args = TrainingArguments(**{**options, "label_names": None}, train_sampling_strategy="sequential")
    trainer = SegmentMemoryTrainer(model=tiny_xl(), args=args, data_collator=default_data_collator)
    with pytest.raises(ValueError, match=r"lacks \['labels'\].*label_names=\['shift_labels'\]"):
        trainer.evaluate(held_out)


def test_trainer_runs_without_memory_when_mem_len_is_0(tmp_path):
    tokens = torch.randint(0, 40, (120,), generator=torch.Generator().manual_seed(4))
    train, held_out = StreamSegments(tokens[:90], 2, 6), StreamSegments(tokens[90:], 2, 6)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=2,
                             max_steps=3, train_sampling_strategy="sequential", report_to="none",
                             remove_unused_columns=False, use_cpu=True, save_strategy="no",
                             label_names=["shift_labels"], prediction_loss_only=True, disable_tqdm=True)
    trainer = SegmentMemoryTrainer(model=tiny_xl(mem_len=0), args=args, train_dataset=train, eval_dataset=held_out,
                                   data_collator=default_data_collator)
    trainer.train()
    assert trainer.memory["train"] == {"mems": None}
    without_memory = stream_perplexity(trainer.model, tokens[90:], tgt_len=6, batch_size=2)["perplexity"]
    assert math.isclose(trainer.evaluate()["eval_perplexity"], without_memory, rel_tol=1e-5)


def test_stream_perplexity_counts_every_token_once_and_memory_reproduces_one_window():
    model = tiny_xl(mem_len=64).eval()
    tokens = torch.randint(0, 40, (41,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        whole = model(tokens[None, :-1], shift_labels=tokens[None, 1:]).losses
    segmented = stream_perplexity(model, tokens, tgt_len=7)  # 6 segments, the last one 5 tokens
    assert segmented["tokens"] == 40
    assert math.isclose(segmented["loss"], whole.mean().item(), rel_tol=1e-5)
    assert not math.isclose(stream_perplexity(model, tokens, tgt_len=7, mem_len=0)["loss"], whole.mean().item(),
                            rel_tol=1e-3)


def test_pretrain_then_evaluate_from_the_command_line(tmp_path, shared_data, capsys):
    corpus = shared_data / "corpus/en/wikitext-2/wiki.valid.tokens"
    test_lines = (shared_data / "corpus/en/wikitext-2/wiki.test.tokens").read_text().splitlines(keepends=True)
    held_out = tmp_path / "test_head.tokens"  # the first 400 lines of the real test split
    held_out.write_text("".join(test_lines[:400]))
    code, _, err = run_cli(["tokenizer", "train", "--corpus", corpus, "--kind", "words", "--vocab-size", 2000,
                            "--no-lowercase", "--output", tmp_path / "tok"], capsys)
    assert code == 0, err
    out = tmp_path / "xl"
    code, _, err = run_cli(["pretrain", "transfo-xl", "--corpus", corpus, "--tokenizer", tmp_path / "tok",
                            "--size", "tiny", "--tgt-len", 32, "--mem-len", 32, "--per_device_train_batch_size", 8,
                            "--per_device_eval_batch_size", 4, "--max_steps", 30, "--learning_rate", 2e-3,
                            "--gradient_accumulation_steps", 2, "--validation_corpus", held_out, "--output", out,
                            "--report_to", "none", "--disable_tqdm", "true"], capsys)
    assert code == 0, err
    results = json.loads((out / "pretrain_results.json").read_text())
    assert results["final_eval_loss"] < results["initial_eval_loss"] - 1.0
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.mem_len == 32 and model.config.eos_token_id == 1
    from hf_plm_ext.hub.cards import render_card

    card = render_card(out, repo_id="someone/xl-wt2", language="en")
    assert card.data.pipeline_tag == "text-generation" and "transfo-xl" in card.data.tags
    assert f"| held-out perplexity | {round(results['final_eval_perplexity'], 2)} |" in card.text
    assert "| tgt_len | 32 |" in card.text and "mlm_probability" not in card.text

    # the Trainer's evaluation reads the same 4 streams with the same memory: the same perplexity, token-weighted
    code, _, err = run_cli(["eval", "lm", "--model", out, "--corpus", held_out, "--tgt-len", 32, "--batch-size", 4,
                            "--output", tmp_path / "same.json"], capsys)
    assert code == 0, err
    same = json.loads((tmp_path / "same.json").read_text())
    assert math.isclose(same["perplexity"], results["final_eval_perplexity"], rel_tol=1e-5)
    code, stdout, err = run_cli(["eval", "lm", "--model", out, "--corpus", held_out, "--tgt-len", 32, "--mem-len", 64,
                                 "--batch-size", 4, "--output", tmp_path / "ppl.json"], capsys)
    assert code == 0, err
    measured = json.loads((tmp_path / "ppl.json").read_text())
    assert measured["mem_len"] == 64 and "perplexity" in stdout
    assert measured["perplexity"] < math.exp(results["initial_eval_loss"])
    assert "bits_per_character" not in measured  # a word-level vocabulary


def test_pretrain_bad_segment_sizes_are_one_clear_error(tmp_path, shared_data, capsys):
    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    corpus = shared_data / "corpus/en/wikitext-2/wiki.valid.tokens"
    train_tokenizer([corpus], "words", vocab_size=500).save_pretrained(tmp_path / "tok")
    common = ["pretrain", "transfo-xl", "--corpus", corpus, "--tokenizer", tmp_path / "tok", "--size", "tiny",
              "--max_steps", 1, "--report_to", "none"]
    for flag, value, message in (("--mem-len", -1, "--mem-len must be >= 0"),
                                 ("--tgt-len", 0, "segment length (0)")):
        code, _, err = run_cli([*common, flag, value, "--output", tmp_path / f"out{value}"], capsys)
        assert code == 2 and message in err, err
        assert not (tmp_path / f"out{value}").exists()


def test_eval_lm_bad_input_is_one_clear_error(tmp_path, shared_data, capsys):
    code, _, err = run_cli(["eval", "lm", "--model", tmp_path / "missing", "--corpus",
                            shared_data / "corpus/en/wikitext-2/wiki.test.tokens"], capsys)
    assert code == 2 and "model directory not found" in err
    tiny_xl().save_pretrained(tmp_path / "xl")
    from hf_plm_ext.data.tokenizer_training import train_tokenizer

    train_tokenizer([shared_data / "corpus/en/wikitext-2/wiki.valid.tokens"], "chars", vocab_size=30,
                    min_frequency=1).save_pretrained(tmp_path / "xl")
    code, _, err = run_cli(["eval", "lm", "--model", tmp_path / "xl", "--corpus", tmp_path / "nope.txt"], capsys)
    assert code == 2 and "corpus file not found" in err
    code, _, err = run_cli(["eval", "lm", "--model", tmp_path / "xl", "--corpus",
                            shared_data / "corpus/en/wikitext-2/wiki.test.tokens", "--mem-len", -1], capsys)
    assert code == 2 and "--mem-len must be >= 0" in err
    shakespeare = tmp_path / "shakespeare.txt"
    shakespeare.write_text((shared_data / "corpus/en/tinyshakespeare/input.txt").read_text()[:20000])
    for flag in ("--tgt-len", "--batch-size"):
        code, _, err = run_cli(["eval", "lm", "--model", tmp_path / "xl", "--corpus", shakespeare, flag, 0], capsys)
        assert code == 2 and "must be positive" in err, err
    code, out, err = run_cli(["eval", "lm", "--model", tmp_path / "xl", "--corpus", shakespeare, "--tgt-len", 64,
                              "--batch-size", 8], capsys)
    assert code == 0, err
    assert "bits per character" in out
    # the memory settings reach the model, and the bits are the same loss in base 2
    code, _, err = run_cli(["eval", "lm", "--model", tmp_path / "xl", "--corpus", shakespeare, "--tgt-len", 64,
                            "--mem-len", 16, "--clamp-len", 3, "--same-length", "--output", tmp_path / "r.json"],
                           capsys)
    assert code == 0, err
    results = json.loads((tmp_path / "r.json").read_text())
    assert (results["mem_len"], results["clamp_len"], results["same_length"]) == (16, 3, True)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "xl")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "xl")
    stream = tokenize_stream([shakespeare], tokenizer)
    expected = stream_perplexity(model, stream, tgt_len=64, mem_len=16, clamp_len=3, same_length=True)
    assert (model.config.mem_len, model.config.clamp_len, model.config.same_length) == (8, -1, False)  # unchanged
    assert results["tokens"] == expected["tokens"] > 19000
    assert math.isclose(results["loss"], expected["loss"], rel_tol=1e-6)
    assert math.isclose(results["bits_per_character"] * math.log(2), expected["loss"], rel_tol=1e-6)
    assert not math.isclose(stream_perplexity(model, stream, tgt_len=64, mem_len=16)["loss"], expected["loss"],
                            rel_tol=1e-4)
