"""Issue 21, claim (b): is the bigram plateau of ``rev_lsh_char_lm.py`` a training-length effect or a defect?

The same budget (context 256, batch 16, AdamW 2e-3, 30 warm-up steps, the books of rev_lsh_char_lm.py) for
transformers' GPT-2 and for this family's causal model with full attention (2 layers x 128, 2 heads), reversible
and not; train bits per character every 100 steps and held-out bits per character at the end.

    .venv/bin/python benchmarks/rev_lsh_char_lm_check.py STEPS
"""
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from rev_lsh_char_lm import BOOKS, read_books, windows  # noqa: E402
from hf_plm_ext import RevLSHConfig, RevLSHForCausalLM  # noqa: E402

CONTEXT, BATCH, STEPS, LR = 256, 16, int(sys.argv[1]), 2e-3
train_ids, held_out, vocab = read_books(BOOKS)

def ours(reversible):
    return RevLSHForCausalLM(RevLSHConfig(vocab_size=vocab, hidden_size=128, num_attention_heads=2, attention_head_size=64,
        feed_forward_size=512, attn_layers=["full"] * 2, lsh_attn_chunk_length=64, local_attn_chunk_length=64,
        max_position_embeddings=CONTEXT, is_decoder=True, hidden_dropout_prob=0.0, lsh_attention_probs_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.0, full_attention_probs_dropout_prob=0.0, pad_token_id=None,
        eos_token_id=None, reversible=reversible))

def gpt2():
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=CONTEXT, n_embd=128, n_layer=2, n_head=2,
                                      resid_pdrop=0, embd_pdrop=0, attn_pdrop=0))

for name, make in (("gpt2", gpt2), ("rev-lsh full", lambda: ours(True)), ("rev-lsh full, not reversible", lambda: ours(False))):
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
    g = torch.Generator().manual_seed(0)
    t = time.perf_counter()
    for step in range(1, STEPS + 1):
        batch = windows(train_ids, CONTEXT, BATCH, g)
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0:
            print(name, step, round(loss.item() / math.log(2), 3), flush=True)
    model.eval()
    losses = []
    with torch.no_grad():
        for w in windows(held_out, CONTEXT, 16, torch.Generator().manual_seed(1)):
            losses.append(model(w[None], labels=w[None]).loss.item())
    print(name, "held-out bpc", round(sum(losses) / len(losses) / math.log(2), 3), "s", round(time.perf_counter() - t), flush=True)
