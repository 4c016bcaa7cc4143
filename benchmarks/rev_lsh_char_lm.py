"""Issue 21, claim (b), small: character-level language modelling at context 4,096.

The paper (section 5, enwik8) reports that LSH attention with more hash rounds approaches full attention. This
is a CPU-sized version on public-domain books of ``../shared/data/corpus/en/gutenberg``: every book but the last
trains, the last (held out) is scored. The same causal model (``--layers`` x ``--hidden``) is trained for the
same number of steps with each attention: LSH with 1 / 2 / 4 hash rounds, local (chunked) and full. Reported:
bits per character on held-out windows of ``--context`` characters, and seconds per step (of this one run, all
configurations run one after the other in one process). ``--seconds``: the same time budget for each, not the
same steps.

    .venv/bin/python benchmarks/rev_lsh_char_lm.py --out benchmarks/results/rev_lsh_char_lm
"""

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch

from hf_plm_ext import RevLSHConfig, RevLSHForCausalLM

ROOT = Path(__file__).resolve().parents[1]
BOOKS = Path(os.environ.get("HF_PLM_EXT_SHARED_DATA", ROOT.parent / "shared" / "data")) / "corpus/en/gutenberg"
VARIANTS = [("lsh", 1), ("lsh", 2), ("lsh", 4), ("local", None), ("full", None)]


def read_books(books_dir):
    """``(train ids, held-out ids, vocabulary size)``: characters of every book but the last, and of the last
    (characters seen only in the held-out book share one id)."""
    books = sorted(Path(books_dir).glob("*.txt"))
    train_text = "\n".join(book.read_text(encoding="utf-8") for book in books[:-1])
    held_out_text = books[-1].read_text(encoding="utf-8")
    vocabulary = {char: index + 1 for index, char in enumerate(sorted(set(train_text)))}  # 0: unseen
    encode = lambda text: torch.tensor([vocabulary.get(char, 0) for char in text])  # noqa: E731
    return encode(train_text), encode(held_out_text), len(vocabulary) + 1


def windows(ids, context, count, generator):
    starts = torch.randint(0, len(ids) - context, (count,), generator=generator)
    return torch.stack([ids[start:start + context] for start in starts])


def bits_per_character(model, held_out, context, count):
    model.eval()
    losses = []
    with torch.no_grad():
        for window in windows(held_out, context, count, torch.Generator().manual_seed(1)):
            losses.append(model(window[None], labels=window[None], use_cache=False).loss.item())
    model.train()
    return sum(losses) / len(losses) / math.log(2)


def train(kind, num_hashes, data, args):
    train_ids, held_out, vocab_size = data
    torch.manual_seed(args.seed)
    config = RevLSHConfig(vocab_size=vocab_size, hidden_size=args.hidden, num_attention_heads=2,
                          attention_head_size=args.hidden // 2, feed_forward_size=4 * args.hidden,
                          attn_layers=[kind] * args.layers, num_hashes=num_hashes or 1, lsh_attn_chunk_length=args.chunk,
                          local_attn_chunk_length=args.chunk, max_position_embeddings=args.context, is_decoder=True,
                          hidden_dropout_prob=0.0, lsh_attention_probs_dropout_prob=0.0,
                          local_attention_probs_dropout_prob=0.0, full_attention_probs_dropout_prob=0.0,
                          position_embedding_type=args.positions, pad_token_id=None, eos_token_id=None)
    model = RevLSHForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / args.warmup))
    generator = torch.Generator().manual_seed(args.seed)
    history, started = [], time.perf_counter()
    steps = 0
    for step in range(1, args.steps + 1):
        if args.seconds and time.perf_counter() - started > args.seconds:
            break
        steps = step
        batch = windows(train_ids, args.context, args.batch_size, generator)
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % args.log_every == 0:
            history.append({"step": step, "train_bits_per_character": round(loss.item() / math.log(2), 4)})
            print(kind, num_hashes, history[-1], flush=True)
    seconds_per_step = (time.perf_counter() - started) / steps
    bpc = bits_per_character(model, held_out, args.context, args.eval_windows)
    print(kind, num_hashes, "held-out bpc", round(bpc, 4), "after", steps, "steps", flush=True)
    return {"kind": kind, "num_hashes": num_hashes, "bits_per_character": round(bpc, 4), "steps": steps,
            "seconds_per_step": round(seconds_per_step, 3), "history": history}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_char_lm")
    parser.add_argument("--books", default=str(BOOKS))
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seconds", type=float, help="a time budget per variant (then --steps is the most)")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--eval-windows", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--positions", default="rotary", choices=["absolute", "rotary"],
                        help="learned absolute positions stayed on the bigram plateau at 4,096 (README)")
    parser.add_argument("--only", nargs="+", help="variants to run, e.g. lsh1 local full")
    args = parser.parse_args()
    data = read_books(args.books)
    chosen = [(kind, hashes) for kind, hashes in VARIANTS
              if not args.only or f"{kind}{hashes or ''}" in args.only]
    results = [train(kind, hashes, data, args) for kind, hashes in chosen]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"arguments": vars(args), "results": results}, indent=1) + "\n")
    rows = ["| attention | steps | held-out bits per character | seconds per step |", "|---|---:|---:|---:|"]
    for r in results:
        name = f"LSH, {r['num_hashes']} hash(es)" if r["kind"] == "lsh" else r["kind"]
        rows.append(f"| {name} | {r['steps']} | {r['bits_per_character']:.3f} | {r['seconds_per_step']} |")
    out.with_suffix(".md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
