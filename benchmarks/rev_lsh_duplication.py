"""Issue 21, claim (a), small: the synthetic duplication task of the Reformer paper (section 5).

A sequence ``0 w 0 w`` with ``w`` random symbols: the model (causal) must predict the second ``w``, which needs
attention to the position one copy back. The paper's setting is length 1024 with 1-layer models, 150k steps; this
is a CPU-sized version (``--half`` symbols, 2 layers of d_model 128, ``--steps``). Models: LSH layers with
``num_hashes`` 1 / 2 / 4 / 8, and the same model with full attention. Reported: accuracy on the second copy over
held-out sequences (LSH evaluated with the training rounds and with 8 rounds, as the paper does).

    .venv/bin/python benchmarks/rev_lsh_duplication.py --out benchmarks/results/rev_lsh_duplication
"""

import argparse
import json
import time
from pathlib import Path

import torch

from hf_plm_ext import RevLSHConfig, RevLSHForCausalLM

SYMBOLS = 64  # tokens 1..SYMBOLS; 0 separates the copies


def batch(size, half, generator):
    words = torch.randint(1, SYMBOLS + 1, (size, half), generator=generator)
    zero = torch.zeros(size, 1, dtype=torch.long)
    ids = torch.cat([zero, words, zero, words], dim=1)
    labels = torch.full_like(ids, -100)
    labels[:, half + 2:] = ids[:, half + 2:]  # only the second copy is scored
    return ids, labels


def accuracy(model, half, num_hashes, generator):
    ids, labels = batch(256, half, generator)
    model.eval()
    with torch.no_grad():
        logits = model(ids, num_hashes=num_hashes).logits
    model.train()
    predicted, targets = logits[:, half + 1:-1].argmax(-1), labels[:, half + 2:]
    return (predicted == targets).float().mean().item()


def train(kind, num_hashes, args):
    torch.manual_seed(args.seed)
    config = RevLSHConfig(vocab_size=SYMBOLS + 1, hidden_size=128, num_attention_heads=2, attention_head_size=64,
                          feed_forward_size=256, attn_layers=[kind] * 2, num_hashes=num_hashes,
                          lsh_attn_chunk_length=args.chunk, max_position_embeddings=2 * args.half + 2,
                          is_decoder=True, hidden_dropout_prob=0.0, lsh_attention_probs_dropout_prob=0.0,
                          full_attention_probs_dropout_prob=0.0, pad_token_id=None)
    model = RevLSHForCausalLM(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    started, history = time.perf_counter(), []
    for step in range(1, args.steps + 1):
        ids, labels = batch(args.batch_size, args.half, generator)
        loss = model(ids, shift_labels=torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % args.eval_every == 0 or step == args.steps:
            history.append({"step": step, "loss": round(loss.item(), 4),
                            "accuracy": round(accuracy(model, args.half, num_hashes, torch.Generator().manual_seed(1)),
                                              4)})
            print(kind, num_hashes, history[-1], flush=True)
    held_out = torch.Generator().manual_seed(1)
    result = {"kind": kind, "num_hashes": num_hashes if kind == "lsh" else None, "history": history,
              "accuracy": accuracy(model, args.half, num_hashes, held_out),
              "seconds": round(time.perf_counter() - started, 1)}
    if kind == "lsh":
        result["accuracy_eval_8_hashes"] = accuracy(model, args.half, 8, torch.Generator().manual_seed(1))
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_duplication")
    parser.add_argument("--half", type=int, default=63, help="symbols in each copy (length 2 * half + 2)")
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hashes", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    results = [train("full", 1, args)] + [train("lsh", h, args) for h in args.hashes]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"arguments": vars(args), "results": results}, indent=1) + "\n")
    rows = ["| model | accuracy on the second copy | (LSH evaluated with 8 hashes) | seconds |", "|---|---:|---:|---:|"]
    for r in results:
        name = "full attention" if r["kind"] == "full" else f"LSH, {r['num_hashes']} hash(es)"
        eight = f"{r['accuracy_eval_8_hashes']:.3f}" if "accuracy_eval_8_hashes" in r else "-"
        rows.append(f"| {name} | {r['accuracy']:.3f} | {eight} | {r['seconds']} |")
    out.with_suffix(".md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
