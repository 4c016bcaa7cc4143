"""ELECTRA training-step time: hf-plm-ext's joint model vs a hand-written loop vs electra-pytorch.

All three train the same transformers models (discriminator ELECTRA-Small 12 x 256, embedding
128; generator 1/4 wide: 12 x 64, 1 head), token/position/type embeddings shared, on the same
batches of 8 x 128 random tokens, with AdamW: one forward + backward + optimizer step.

* ``ours``: ``ElectraForRTDPreTraining`` (vocabulary logits only at masked positions).
* ``hand_written``: ``ElectraForMaskedLM(labels=...)`` + Gumbel sampling + ``ElectraForPreTraining``
  in a plain loop, the way the two halves are usually put together.
* ``electra_pytorch``: lucidrains' ``Electra`` wrapper (``pip install --no-deps electra-pytorch==0.1.2``;
  its metadata pins transformers 3), around the same two models.

Times: alternating rounds in one process, median seconds per step. Peak memory: each
implementation alone in a fresh process, rise of VmHWM over the first 3 steps.

    .venv/bin/python benchmarks/rtd_step.py [--rounds 3] [--steps 5]

Writes benchmarks/results/rtd_step.json and .md.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import ElectraForMaskedLM, ElectraForPreTraining

from hf_plm_ext import ElectraForRTDPreTraining, ElectraRTDConfig

RESULTS = Path(__file__).resolve().parent / "results"
VOCAB, MASK, PAD, CLS, SEP = 30522, 103, 0, 101, 102
BATCH, LENGTH = 8, 128


def config():
    return ElectraRTDConfig.from_size("small", vocab_size=VOCAB, mask_token_id=MASK, pad_token_id=PAD)


def batches(count, seed=0):
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(1000, VOCAB, (BATCH, LENGTH), generator=generator)
        ids[:, 0], ids[:, -1] = CLS, SEP
        special = ((ids == CLS) | (ids == SEP)).long()
        out.append((ids, torch.ones_like(ids), special))
    return out


class Ours:
    def __init__(self):
        self.model = ElectraForRTDPreTraining(config()).train()

    def loss(self, ids, attention_mask, special):
        return self.model(ids, attention_mask=attention_mask, special_tokens_mask=special).loss


class HandWritten:
    """The two transformers halves in a plain loop, embeddings tied by sharing the module."""

    def __init__(self):
        joint = config()
        self.model = torch.nn.ModuleDict({"generator": ElectraForMaskedLM(joint.generator_config),
                                          "discriminator": ElectraForPreTraining(joint.discriminator_config)}).train()
        self.model.generator.electra.embeddings = self.model.discriminator.electra.embeddings
        shared_words = self.model.discriminator.electra.embeddings.word_embeddings.weight
        self.model.generator.generator_lm_head.weight = shared_words
        self.masker = ElectraForRTDPreTraining(joint)  # only its masking function, for identical inputs

    def loss(self, ids, attention_mask, special):
        masked_ids, labels = self.masker.mask_tokens(ids, attention_mask, special)
        generator = self.model.generator(masked_ids, attention_mask=attention_mask, labels=labels)
        masked = labels != -100
        with torch.no_grad():
            logits = generator.logits[masked]
            gumbel = -torch.log(-torch.log(torch.rand_like(logits) + 1e-9) + 1e-9)
            sampled = (logits + gumbel).argmax(-1)
        fake = ids.clone()
        fake[masked] = sampled
        replaced = (fake != ids).long()
        discriminator = self.model.discriminator(fake, attention_mask=attention_mask, labels=replaced)
        return generator.loss + 50.0 * discriminator.loss


class LucidrainsElectra:
    def __init__(self):
        from electra_pytorch import Electra

        joint = config()

        class Logits(torch.nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, ids, **kwargs):
                return self.model(ids, **kwargs).logits

        generator = ElectraForMaskedLM(joint.generator_config)
        discriminator = ElectraForPreTraining(joint.discriminator_config)
        generator.electra.embeddings = discriminator.electra.embeddings
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
        self.model = Electra(Logits(generator), Logits(discriminator), mask_token_id=MASK, pad_token_id=PAD,
                             mask_ignore_token_ids=[CLS, SEP], mask_prob=0.15, replace_prob=0.85,
                             random_token_prob=0.0, disc_weight=50.0).train()

    def loss(self, ids, attention_mask, special):
        return self.model(ids, attention_mask=attention_mask).loss


IMPLEMENTATIONS = {"ours": Ours, "hand_written": HandWritten, "electra_pytorch": LucidrainsElectra}


def available():
    try:
        import electra_pytorch  # noqa: F401
    except ImportError:
        print("electra-pytorch is not installed (pip install --no-deps electra-pytorch==0.1.2); leaving it out")
        return {k: v for k, v in IMPLEMENTATIONS.items() if k != "electra_pytorch"}
    return IMPLEMENTATIONS


def make(name):
    torch.manual_seed(0)
    implementation = IMPLEMENTATIONS[name]()
    params = list(dict.fromkeys(implementation.model.parameters()))  # shared tensors once
    implementation.optimizer = torch.optim.AdamW(params, lr=5e-4)
    implementation.num_parameters = sum(p.numel() for p in params)
    return implementation


def step(implementation, batch):
    loss = implementation.loss(*batch)
    loss.backward()
    implementation.optimizer.step()
    implementation.optimizer.zero_grad(set_to_none=True)


def peak_rss_kib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])


def memory_of(name):
    """Run in a fresh process: VmHWM rise over model creation + 3 steps."""
    before = peak_rss_kib()
    implementation = make(name)
    for batch in batches(3):
        step(implementation, batch)
    return (peak_rss_kib() - before) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_of:
        print(json.dumps({"peak_mib": memory_of(args.memory_of)}))
        return

    names = list(available())
    implementations = {name: make(name) for name in names}
    data = batches(args.steps)
    for implementation in implementations.values():  # warm-up
        step(implementation, data[0])
    rounds = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, implementation in implementations.items():
            start = time.perf_counter()
            for batch in data:
                step(implementation, batch)
            rounds[name].append((time.perf_counter() - start) / len(data))
    seconds = {name: statistics.median(values) for name, values in rounds.items()}
    memory = {}
    for name in names:
        completed = subprocess.run([sys.executable, __file__, "--memory-of", name], capture_output=True, text=True,
                                   check=True)
        memory[name] = json.loads(completed.stdout.strip().splitlines()[-1])["peak_mib"]
    result = {
        "setup": f"discriminator 12 x 256 (embedding 128), generator 12 x 64, vocab {VOCAB}, batch {BATCH} x {LENGTH}, "
                 f"AdamW, CPU threads {torch.get_num_threads()}",
        "num_parameters": {name: impl.num_parameters for name, impl in implementations.items()},
        "seconds_per_step": seconds, "rounds": rounds, "peak_rss_rise_mib": memory,
        "ratio_ours_over_hand_written": seconds["ours"] / seconds["hand_written"],
    }
    if "electra_pytorch" in seconds:
        result["ratio_ours_over_electra_pytorch"] = seconds["ours"] / seconds["electra_pytorch"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rtd_step.json").write_text(json.dumps(result, indent=2) + "\n")
    table = ("| implementation | s / step | time vs ours | peak RSS rise (MiB) | parameters |\n"
             "|---|---:|---:|---:|---:|\n")
    for name in names:
        table += (f"| {name} | {seconds[name]:.3f} | {seconds[name] / seconds['ours']:.2f}x | {memory[name]:.0f} | "
                  f"{implementations[name].num_parameters:,} |\n")
    (RESULTS / "rtd_step.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
