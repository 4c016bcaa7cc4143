"""Perplexity of a causal language model over a text file, every token counted once: a segment-memory model
(Transformer-XL) carries its memory from segment to segment, any other reads each segment alone.

The reference's ``eval.py``: the corpus is one token stream in ``batch_size`` parallel streams
read in ``tgt_len`` segments, each segment with the memory its stream left (``mem_len`` tokens
per layer); ``clamp_len`` and ``same_length`` can differ from training (the paper evaluates
WikiText-103 with tgt_len 64, mem_len 640, clamp_len 400, same_length). Perplexity is
``exp`` of the mean next-token loss over all predicted tokens; for a character-level
vocabulary the bits per character are that mean in bits.
"""

import math
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_plm_ext.checkpoints.loading import check_tokenizer_fits, load_pretrained
from hf_plm_ext.data.segment_streams import StreamSegments, tokenize_stream
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.training.segment_memory import carried_memory


def is_character_level(tokenizer) -> bool:
    special = set(tokenizer.all_special_tokens)
    return all(len(token) == 1 for token in tokenizer.get_vocab() if token not in special)


@torch.no_grad()
def stream_perplexity(model, token_ids, tgt_len, batch_size=1, device=None, **memory_settings) -> dict:
    """Mean next-token loss of ``model`` over ``token_ids`` read as ``batch_size`` streams with memory;
    ``memory_settings`` (``mem_len``, ``clamp_len``, ``same_length``) go to every forward call."""
    device = device or next(model.parameters()).device
    segments = StreamSegments(token_ids, batch_size, tgt_len)
    model.eval()
    total, count, memory = 0.0, 0, {}
    started = time.perf_counter()
    for step in range(segments.n_segments):
        batch = [segments[step * batch_size + row] for row in range(batch_size)]
        input_ids = torch.stack([item["input_ids"] for item in batch]).to(device)
        targets = torch.stack([item["shift_labels"] for item in batch]).to(device)
        outputs = model(input_ids, shift_labels=targets, **memory, **memory_settings)
        if outputs.get("mems") is not None:  # a segment-memory model; any other causal LM reads each segment alone
            memory = carried_memory(outputs)
        total += token_losses(outputs, targets).double().sum().item()
        count += targets.numel()
    loss = total / count
    return {"loss": loss, "perplexity": math.exp(min(loss, 700)), "tokens": count,
            "seconds": round(time.perf_counter() - started, 3)}


def token_losses(outputs, targets) -> torch.Tensor:
    """Per-token negative log-likelihoods: the model's ``losses`` (Transformer-XL's adaptive softmax), or from its
    logits ``[batch, seq, vocab]`` against ``targets`` (-100: not counted, 0)."""
    if outputs.get("losses") is not None:
        return outputs.losses
    return torch.nn.functional.cross_entropy(outputs.logits.flatten(0, 1).float(), targets.flatten(),
                                             ignore_index=-100, reduction="none")


def evaluate_language_model(model, tokenizer, corpus_files, tgt_len, mem_len=None, clamp_len=None,
                            same_length=None, batch_size=1) -> dict:
    """``stream_perplexity`` on text files, with the memory settings given (None: the model's own), passed to the
    forward calls; ``model.config`` is not changed. ``model`` may be a checkpoint folder (loaded as a causal LM,
    onto the GPU when there is one) and ``tokenizer`` a folder or None (the model's folder)."""
    if isinstance(model, (str, Path)):
        tokenizer_path, model_path = model if tokenizer is None else tokenizer, model
        model = load_pretrained(AutoModelForCausalLM, model, "model")
        if isinstance(tokenizer_path, (str, Path)):
            tokenizer = load_pretrained(AutoTokenizer, tokenizer_path, "tokenizer")
            check_tokenizer_fits(tokenizer, model, tokenizer_path, model_path)
        if torch.cuda.is_available():
            model.to("cuda")
    if tgt_len < 1 or batch_size < 1:
        raise UserInputError(f"--tgt-len ({tgt_len}) and --batch-size ({batch_size}) must be positive")
    if mem_len is not None and mem_len < 0:
        raise UserInputError(f"--mem-len must be >= 0, got {mem_len}")
    config = model.config
    asked = {"mem_len": mem_len, "clamp_len": clamp_len, "same_length": same_length}
    for name, value in asked.items():
        if value is not None and not hasattr(config, name):
            raise UserInputError(f"--{name.replace('_', '-')}: the {config.model_type} model has no {name}")
    # forward arguments of every call: the model and its config stay as they are (safe beside other threads)
    settings = {name: value for name, value in asked.items() if value is not None}
    results = stream_perplexity(model, tokenize_stream(corpus_files, tokenizer), tgt_len, batch_size, **settings)
    results.update({name: settings.get(name, getattr(config, name, None)) for name in asked})
    results.update(tgt_len=tgt_len, batch_size=batch_size, corpus=[str(f) for f in corpus_files])
    if is_character_level(tokenizer):
        results["bits_per_character"] = results["loss"] / math.log(2)
    return results
