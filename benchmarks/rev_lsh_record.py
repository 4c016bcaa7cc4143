"""Issue 52, item 3: what a reversible LSH stack keeps per layer for its backward. Activation memory of a 24-layer
and a 6-layer stack, one training step (forward + backward of ``last_hidden_state.sum()``), n = 4096, LSH layers
(2 hashes, chunks of 64), batch 1, each point the median of 3 fresh processes: activation = VmHWM after the step
(reset before it) minus VmRSS before it, minus the fp32 gradient bytes. Widths: 64 (tiny), 256 and 1024 per half;
transformers' Reformer (the same layers, ``ReformerModel``) measured the same way in the same run. Goal: ours
24 / 6 <= 1.05. The bytes of the buckets the backward keeps per layer are counted exactly.

    .venv/bin/python benchmarks/rev_lsh_record.py --out benchmarks/results/rev_lsh_record
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from unittest import mock

DEPTHS = (6, 24)
WIDTHS = {64: (2, 32, 256), 256: (4, 64, 1024), 1024: (8, 128, 4096)}  # hidden: (heads, head size, feed-forward)
LENGTH = 4096


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def build(implementation: str, depth: int, hidden: int):
    import torch

    heads, head_size, feed_forward = WIDTHS[hidden]
    fields = dict(vocab_size=320, hidden_size=hidden, num_attention_heads=heads, attention_head_size=head_size,
                  feed_forward_size=feed_forward, attn_layers=["lsh"] * depth, num_hashes=2,
                  lsh_attn_chunk_length=64, max_position_embeddings=LENGTH, hidden_dropout_prob=0.0,
                  lsh_attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    if implementation == "ours":
        from hf_plm_ext import RevLSHConfig, RevLSHModel

        return RevLSHModel(RevLSHConfig(**fields)).train()
    from transformers import ReformerConfig, ReformerModel

    return ReformerModel(ReformerConfig(**fields, axial_pos_embds=False, is_decoder=False,
                                        lsh_num_chunks_after=0)).train()


def one_point(implementation: str, depth: int, hidden: int) -> dict:
    import torch

    model = build(implementation, depth, hidden)
    ids = torch.randint(0, 320, (1, LENGTH))
    records = []
    if implementation == "ours":  # the per-layer record the backward keeps, counted exactly
        from hf_plm_ext.modeling.rev_lsh.reversible_rev_lsh import ReversibleFunction

        original = ReversibleFunction.forward

        def keep_records(ctx, *args):
            out = original(ctx, *args)
            records.extend(ctx.records)
            return out

        patch = mock.patch.object(ReversibleFunction, "forward", staticmethod(keep_records))
    else:
        patch = mock.patch.dict({})
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here: the step's peak, not the construction's
    before = status_kib("VmRSS")
    with patch:
        model(ids).last_hidden_state.sum().backward()
    peak = status_kib("VmHWM")
    gradient_kib = sum(p.numel() * 4 for p in model.parameters()) / 1024
    bucket_bytes = [r["buckets"].numel() * r["buckets"].element_size() for r in records if r.get("buckets") is not None]
    return {"activation_mib": round((peak - before - gradient_kib) / 1024, 1),
            "bucket_bytes_per_layer": bucket_bytes[0] if bucket_bytes else None,
            "bucket_dtype": str(records[0]["buckets"].dtype) if bucket_bytes else None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results/rev_lsh_record")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per point; the median is reported")
    parser.add_argument("--point", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        print("RESULT " + json.dumps(one_point(args.point[0], int(args.point[1]), int(args.point[2]))))
        return
    results = []
    for hidden in WIDTHS:
        for implementation in ("ours", "transformers"):
            for depth in DEPTHS:
                points = []
                for _ in range(args.repeats):
                    done = subprocess.run([sys.executable, __file__, "--point", implementation, str(depth),
                                           str(hidden)], capture_output=True, text=True, check=True)
                    points.append(json.loads(next(line for line in done.stdout.splitlines()
                                                  if line.startswith("RESULT "))[7:]))
                results.append({"implementation": implementation, "layers": depth, "hidden": hidden, **points[0],
                                "activation_mib": statistics.median(p["activation_mib"] for p in points),
                                "all_activation_mib": [p["activation_mib"] for p in points]})
                print(json.dumps(results[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    rows = ["| hidden (per half) | implementation | 6 layers MiB | 24 layers MiB | 24 / 6 | buckets kept per layer |",
            "|---:|---|---:|---:|---:|---|"]
    for hidden in WIDTHS:
        for implementation in ("ours", "transformers"):
            six, twenty_four = (next(r["activation_mib"] for r in results if r["implementation"] == implementation
                                     and r["hidden"] == hidden and r["layers"] == d) for d in DEPTHS)
            kept = next(r for r in results if r["implementation"] == implementation and r["hidden"] == hidden)
            bucket_cell = (f"{kept['bucket_bytes_per_layer'] / 1024:.0f} KiB ({kept['bucket_dtype']})"
                           if kept.get("bucket_bytes_per_layer") else "")
            rows.append(f"| {hidden} | {implementation} | {six} | {twenty_four} | {twenty_four / six:.2f} | "
                        f"{bucket_cell} |")
    out.with_suffix(".md").write_text(f"activation memory of one training step at n = {LENGTH} (VmHWM growth minus "
                                      f"gradients), median of {args.repeats} fresh processes per point\n\n"
                                      + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
