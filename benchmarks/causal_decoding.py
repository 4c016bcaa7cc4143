"""Issue 60, item 4: per-token decoding cost with the cache at growing contexts, and assisted decoding's speed-up, in one
process (timed one thing at a time).

Models of the same width (d 256, 6 layers, 4 heads, vocabulary 320, random weights, fp32, batch 1):
rev-lsh causal (``RevLSHConfig.from_size("small")``, chunks 64, rotary positions) with local layers only and with
LSH layers only (the assisted run alternates them),
Transformer-XL (mem_len 512) and transformers' GPT-2 with its DynamicCache. At each context (``--contexts``) the
prompt is prefilled into the cache (rev-lsh in one forward; XL and GPT-2 in pieces of 512 / 1024 through the
cache), then after 4 untimed steps ``--steps`` greedy steps of one token each are timed; reported: the median seconds per token, the
same model recomputing the whole sequence for one token (no cache), and each family's 16k / 1k ratio (the goal:
<= 1.2, flat in the context). XL's recompute is one segment of the whole context (quadratic scores: at 16k,
4 heads x 16k x 16k fp32 = 4 GiB a matrix), so it is run up to ``--xl-recompute-max``.

Assisted decoding (``generate(assistant_model=...)``, ``--new`` tokens from a ``--assisted-context`` prompt): the
6-layer model with a 2-layer assistant of its family, against plain greedy; once with an assistant of its own
random weights (its drafts mostly rejected) and once with an agreeing one (the main model's layers 3-6 made the
identity, the assistant its first two layers: every draft accepted, the mechanism's upper bound). Both must give
greedy's tokens. Drafts of ``--draft`` tokens (``num_assistant_tokens``), not cut by the assistant's confidence
(``--confidence-threshold`` 0; transformers' default 0.4 stops an untrained model's draft after one token).

    .venv/bin/python benchmarks/causal_decoding.py --out benchmarks/results/causal_decoding
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel

from hf_plm_ext import RevLSHConfig, RevLSHForCausalLM, TransfoXLConfig, TransfoXLLMHeadModel

VOCAB, WIDTH, LAYERS, HEADS = 320, 256, 6, 4
WARM_UP = 4  # decoding steps not timed


def rev_lsh(layers=LAYERS, seed=0, kinds=("local", "lsh")):
    torch.manual_seed(seed)
    config = RevLSHConfig.from_size("small", vocab_size=VOCAB, is_decoder=True, hash_seed=0, num_buckets=16,
                                    attn_layers=(list(kinds) * layers)[:layers], pad_token_id=None,
                                    eos_token_id=None)
    return RevLSHForCausalLM(config).eval()


def transfo_xl(layers=LAYERS, seed=0):
    torch.manual_seed(seed)
    config = TransfoXLConfig.from_size("small", vocab_size=VOCAB, n_layer=layers, mem_len=512, eos_token_id=None)
    return TransfoXLLMHeadModel(config).eval()


def gpt2(longest):
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, n_positions=longest,
                        eos_token_id=None, bos_token_id=None)
    return GPT2LMHeadModel(config).eval()


def cache_of(out):
    return out.cache if getattr(out, "cache", None) is not None else out.past_key_values


@torch.no_grad()
def prefill(model, prompt, piece):
    """The prompt into a cache: in one forward (``piece`` None) or in pieces through the cache."""
    if piece is None:
        out = model(prompt, use_cache=True)
        return cache_of(out), out.logits[:, -1:]
    cache = DynamicCache()
    for start in range(0, prompt.shape[1], piece):
        out = model(prompt[:, start:start + piece], past_key_values=cache, use_cache=True)
        cache = cache_of(out)
    return cache, out.logits[:, -1:]


@torch.no_grad()
def seconds_per_token(model, prompt, steps, piece):
    cache, logits = prefill(model, prompt, piece)
    token, seconds = logits.argmax(-1), []
    for step in range(WARM_UP + steps):  # (the first steps grow the cache's buffers and warm the allocator)
        started = time.perf_counter()
        out = model(token, past_key_values=cache, use_cache=True)
        if step >= WARM_UP:
            seconds.append(time.perf_counter() - started)
        token = out.logits[:, -1:].argmax(-1)
    return statistics.median(seconds)


@torch.no_grad()
def seconds_recomputing(model, prompt, rounds):
    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        model(prompt, use_cache=False)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def decoding_table(args):
    longest = max(args.contexts) + args.steps + 8
    models = {"rev-lsh (local layers)": (rev_lsh(kinds=["local"]), None),
              "rev-lsh (LSH layers)": (rev_lsh(kinds=["lsh"]), None),
              "transfo-xl (mem_len 512)": (transfo_xl(), 512), "gpt-2 (DynamicCache)": (gpt2(longest), 1024)}
    rows = []
    for context in args.contexts:
        prompt = torch.randint(5, VOCAB, (1, context), generator=torch.Generator().manual_seed(context))
        for name, (model, piece) in models.items():
            row = {"model": name, "context": context,
                   "cached_ms_per_token": round(1e3 * seconds_per_token(model, prompt, args.steps, piece), 2)}
            recompute = name.startswith("rev-lsh") or (name.startswith("transfo-xl")
                                                        and context <= args.xl_recompute_max)
            if recompute:
                row["recomputed_ms_per_token"] = round(1e3 * seconds_recomputing(model, prompt, args.rounds), 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def make_identity_after(model, keep):
    """Layers past ``keep`` add nothing to the residual stream (their output projections zero)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parts = name.split(".")
            if "layers" in parts and int(parts[parts.index("layers") + 1]) >= keep and (
                    ".output." in name or "o_net" in name or "CoreNet.3" in name):
                parameter.zero_()


def agreeing_assistant(model, build):
    assistant = build(layers=2)
    assistant.load_state_dict({k: v for k, v in model.state_dict().items() if k in assistant.state_dict()})
    return assistant.eval()


@torch.no_grad()
def timed_generate(model, prompt, new, **options):
    started = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, **options)
    return time.perf_counter() - started, out


def assisted_table(args):
    prompt = torch.randint(5, VOCAB, (1, args.assisted_context), generator=torch.Generator().manual_seed(7))
    rows = []
    for family, build in (("rev-lsh", rev_lsh), ("transfo-xl", transfo_xl)):
        for kind in ("random", "agreeing"):
            model = build()
            if kind == "agreeing":
                make_identity_after(model, keep=2)
                assistant = agreeing_assistant(model, build)
            else:
                assistant = build(layers=2, seed=1)
            # transformers ends a draft where the assistant's confidence falls under 0.4 (its default), which an
            # untrained model's flat distributions do at once: each round would draft one token
            assistant.generation_config.assistant_confidence_threshold = args.confidence_threshold
            assistant.generation_config.num_assistant_tokens = args.draft
            assistant.generation_config.num_assistant_tokens_schedule = args.schedule
            plain, assisted = [], []
            for _ in range(args.rounds):
                seconds, expected = timed_generate(model, prompt, args.new)
                plain.append(seconds)
                seconds, tokens = timed_generate(model, prompt, args.new, assistant_model=assistant)
                assisted.append(seconds)
            row = {"family": family, "assistant": kind, "greedy_s": round(statistics.median(plain), 2),
                   "assisted_s": round(statistics.median(assisted), 2),
                   "speedup": round(statistics.median(plain) / statistics.median(assisted), 2),
                   "same_tokens_as_greedy": bool(torch.equal(tokens, expected))}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def markdown(decoding, assisted, contexts):
    lines = ["| model | " + " | ".join(f"{c // 1024}k cached / recomputed (ms per token)" for c in contexts)
             + f" | {contexts[-1] // 1024}k / {contexts[0] // 1024}k cached |", "|---|" + "---:|" * (len(contexts) + 1)]
    for name in dict.fromkeys(row["model"] for row in decoding):
        mine = {row["context"]: row for row in decoding if row["model"] == name}
        cells = [f"{mine[c]['cached_ms_per_token']} / {mine[c].get('recomputed_ms_per_token', 'not run')}"
                 for c in contexts]
        ratio = mine[contexts[-1]]["cached_ms_per_token"] / mine[contexts[0]]["cached_ms_per_token"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
    lines += ["", "| family | 2-layer assistant | greedy (s) | assisted (s) | speed-up | greedy's tokens |",
              "|---|---|---:|---:|---:|---|"]
    lines += [f"| {r['family']} | {r['assistant']} | {r['greedy_s']} | {r['assisted_s']} | {r['speedup']}x | "
              f"{'yes' if r['same_tokens_as_greedy'] else 'NO'} |" for r in assisted]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--xl-recompute-max", type=int, default=4096)
    parser.add_argument("--assisted-context", type=int, default=1024)
    parser.add_argument("--new", type=int, default=48)
    parser.add_argument("--draft", type=int, default=8, help="the assistant's tokens a round (num_assistant_tokens)")
    parser.add_argument("--confidence-threshold", type=float, default=0.0,
                        help="assistant_confidence_threshold (transformers' default: 0.4)")
    parser.add_argument("--schedule", default="constant", choices=("constant", "heuristic", "heuristic_transient"),
                        help="num_assistant_tokens_schedule (heuristic: a draft 2 longer after a round all accepted, "
                             "1 shorter after one that was not, at least 1)")
    parser.add_argument("--out", default="benchmarks/results/causal_decoding")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    decoding, assisted = decoding_table(args), assisted_table(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"arguments": vars(args), "torch": torch.__version__,
                                                    "decoding": decoding, "assisted": assisted}, indent=1) + "\n")
    table = markdown(decoding, assisted, args.contexts)
    out.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
