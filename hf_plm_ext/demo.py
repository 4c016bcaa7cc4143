"""``hf-plm-ext demo``'s pipeline on data shipped with the package, in a few CPU minutes.

train a tokenizer -> pre-train a tiny encoder -> fine-tune and evaluate on SST-2 (sample) ->
save with its code -> reload with ``AutoModel`` in a fresh process that cannot import hf_plm_ext.

``--adapter pfeiffer`` (or ``houlsby``, ``parallel``, ``lora``): the fine-tuning trains only that adapter and the
head, saves them alone, and the reload puts them on the pre-trained encoder (``AutoPeftModel``; after
``import hf_plm_ext`` for this package's bottleneck adapters).

``--objective transfo-xl``: word tokenizer -> pre-train a tiny Transformer-XL language model ->
held-out perplexity without and with memory -> generate with the memory as cache -> reload
with ``AutoModelForCausalLM`` in a fresh process.

``--objective csc``: Chinese WordPiece tokenizer -> pre-train a tiny MacBERT with correction masking (jieba words,
Cilin similar words) -> fine-tune it for spelling correction (MacBERT4CSC) on pairs misspelt from the embedded
Chinese Wikipedia sample with pycorrector's confusion sets -> correct sentences -> reload the class named by the
checkpoint's ``auto_map`` in a fresh process.
"""

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from importlib.resources import files
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainingArguments

from hf_plm_ext.data.tokenizer_training import train_tokenizer
from hf_plm_ext.eval.language_model import evaluate_language_model
from hf_plm_ext.errors import UserInputError
from hf_plm_ext.finetuning import FinetuneArguments, finetune
from hf_plm_ext.files import check_new_output
from hf_plm_ext.training.objectives import OBJECTIVES
from hf_plm_ext.training.pretrain import pretrain

DEMO_DATA = files("hf_plm_ext") / "demo_data"
DEMO_SAMPLED_WORDS = 30
NOTABLE_FILES = (".py", "adapter_model.safetensors")  # what the save step's row names

RELOAD_SCRIPT = r"""
import json, sys
sys.modules["hf_plm_ext"] = None  # a stranger's machine: the package is not importable
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
model_dir, sentences = sys.argv[1], json.loads(sys.argv[2])
model = AutoModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True).eval()
batch = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)(sentences, padding=True, return_tensors="pt")
with torch.no_grad():
    logits = model(**batch).logits
print("RESULT " + json.dumps({"class": f"{type(model).__module__}.{type(model).__name__}", "logits": logits.tolist()}))
"""

ADAPTER_RELOAD_SCRIPT = r"""
import json, sys
import hf_plm_ext  # registers the bottleneck adapters with PEFT (a LoRA adapter would not need it)
import torch
from peft import AutoPeftModelForSequenceClassification
from transformers import AutoTokenizer
model_dir, sentences = sys.argv[1], json.loads(sys.argv[2])
model = AutoPeftModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True).eval()
batch = AutoTokenizer.from_pretrained(model_dir)(sentences, padding=True, return_tensors="pt")
with torch.no_grad():
    logits = model(**batch).logits
inner = model.base_model.model
print("RESULT " + json.dumps({"class": f"PEFT {model.peft_config['default'].peft_type.value} on {type(inner).__name__}",
                              "logits": logits.tolist()}))
"""

LM_RELOAD_SCRIPT = r"""
import json, sys
sys.modules["hf_plm_ext"] = None  # a stranger's machine: the package is not importable
import torch
from transformers import AutoModelForCausalLM
model_dir, segments = sys.argv[1], json.loads(sys.argv[2])
model = AutoModelForCausalLM.from_pretrained(model_dir, trust_remote_code=True).eval()
mems = None
with torch.no_grad():
    for segment in segments:
        outputs = model(torch.tensor([segment]), mems=mems)
        mems = outputs.mems
print("RESULT " + json.dumps({"class": f"{type(model).__module__}.{type(model).__name__}",
                              "logits": outputs.logits[0, -1].tolist()}))
"""


CSC_RELOAD_SCRIPT = r"""
import json, sys
sys.modules["hf_plm_ext"] = None  # a stranger's machine: the package is not importable
import torch
from transformers import AutoConfig, AutoTokenizer
from transformers.dynamic_module_utils import get_class_from_dynamic_module
model_dir, sentences = sys.argv[1], json.loads(sys.argv[2])
class_ref = AutoConfig.from_pretrained(model_dir, trust_remote_code=True).auto_map["AutoModelForSpellingCorrection"]
model = get_class_from_dynamic_module(class_ref, model_dir).from_pretrained(model_dir).eval()
batch = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)(sentences, padding=True, return_tensors="pt")
with torch.no_grad():
    logits = model(**batch).correction_logits
print("RESULT " + json.dumps({"class": f"{type(model).__module__}.{type(model).__name__}", "logits": logits.tolist()}))
"""


@dataclass
class DemoArguments:
    output: str | None = None  # new directory (default: runs/demo-<time>)
    objective: str = "mlm"  # a row of OBJECTIVES
    pretrain_steps: int = 400
    finetune_epochs: float = 4.0
    seed: int = 42
    adapter: str | None = None  # pfeiffer, houlsby, parallel or lora: fine-tune only that adapter and the head


def _training_args(seed, **kwargs):
    return TrainingArguments(output_dir="unused", seed=seed, report_to="none", save_strategy="no",
                             logging_steps=50, use_cpu=not torch.cuda.is_available(), **kwargs)


def _pretraining_args(objective, args):
    return _training_args(args.seed, max_steps=args.pretrain_steps, warmup_steps=max(1, args.pretrain_steps // 10),
                          **objective.demo_training)


def _step(number, title):
    print(f"\n=== step {number}/5: {title} ===", flush=True)
    return time.perf_counter()


def reload_in_fresh_process(model_dir, inputs, script=RELOAD_SCRIPT):
    """Load ``model_dir`` with ``trust_remote_code=True`` where ``import hf_plm_ext`` fails; return logits."""
    completed = subprocess.run([sys.executable, "-c", script, str(model_dir), json.dumps(inputs)],
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"reloading {model_dir} in a fresh process failed:\n{completed.stderr[-3000:]}")
    result = [line for line in completed.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(result[-1][len("RESULT "):])


def run_demo(args: DemoArguments):
    """Run the demo into ``args.output``; print each step and write ``demo_results.md`` there."""
    if args.objective not in (*OBJECTIVES, "csc"):
        raise UserInputError(f"unknown objective {args.objective!r}; choose one of {', '.join(OBJECTIVES)} or csc")
    if args.objective == "csc" and args.adapter:
        raise UserInputError("--adapter is for the SST-2 fine-tuning, which the 'csc' demo skips")
    out = check_new_output(args.output or Path("runs") / f"demo-{datetime.now():%Y%m%d-%H%M%S}")
    out.mkdir(parents=True)
    if args.objective == "csc":
        return run_spelling_correction(args, out)
    objective = OBJECTIVES[args.objective]
    if objective.demo_pipeline == "language-model":
        if args.adapter:
            raise UserInputError(f"--adapter is for the SST-2 fine-tuning, which the {args.objective!r} demo skips")
        return run_language_model(objective, args, out)
    books = [str(DEMO_DATA / name) for name in ("alice.txt", "frankenstein.txt")]
    sst2 = DEMO_DATA / "sst2"
    # The SST-2 training sentences are unlabelled text for the tokenizer and pre-training too.
    sst2_text = out / "sst2_train_sentences.txt"
    lines = (sst2 / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sst2_text.write_text("\n".join(line.split("\t")[0] for line in lines) + "\n", encoding="utf-8")
    corpus = books + [str(sst2_text)]
    timings = {}

    started = _step(1, "train a WordPiece tokenizer on the embedded text")
    tokenizer = train_tokenizer(corpus, "wordpiece", vocab_size=6000)
    tokenizer.save_pretrained(str(out / "tokenizer"))
    print(f"{len(tokenizer)} tokens, e.g. {tokenizer.tokenize('Alice was beginning to get very tired.')}")
    timings["tokenizer"] = time.perf_counter() - started

    started = _step(2, f"pre-train {objective.demo_model()} with the {args.objective!r} objective")
    pretrain_args = objective.demo_arguments(corpus, str(out / "tokenizer"), str(out / "pretrained"))
    pretrained = pretrain(pretrain_args, _pretraining_args(objective, args))
    print(f"{pretrained['num_parameters']:,} parameters, {pretrained['train_examples']} examples of up to 64 tokens; "
          f"held-out loss {pretrained['initial_eval_loss']:.3f} -> {pretrained['final_eval_loss']:.3f}")
    encoder_dir = objective.checkpoint_to_finetune(out / "pretrained", out)
    timings["pretrain"] = time.perf_counter() - started

    what = f"a {args.adapter} adapter" if args.adapter else "the whole model"
    started = _step(3, f"fine-tune {what} and evaluate on the SST-2 sample (800 train / 200 dev)")
    finetune_args = FinetuneArguments(task="sst2", model=str(encoder_dir), output=str(out / "sst2"),
                                      data_dir=str(sst2), max_seq_length=64, adapter=args.adapter)
    results = finetune("glue", finetune_args, _training_args(
        args.seed, num_train_epochs=args.finetune_epochs, per_device_train_batch_size=32,
        learning_rate=3e-3 if args.adapter else 3e-4, warmup_steps=10))
    accuracy = results["results"][0]["metrics"]["accuracy"]
    timings["finetune"] = time.perf_counter() - started

    if args.adapter:
        started = _step(4, "saved adapter: its weights and the head's, not the encoder's")
    else:
        started = _step(4, "saved checkpoint: weights only (a stock electra: no code, no auto_map needed)"
                        if args.objective == "electra" else "saved checkpoint: weights + the family's code + auto_map")
    saved = sorted(p.name for p in (out / "sst2").iterdir())
    print("files:", ", ".join(saved))
    auto_map = None
    if not args.adapter:
        auto_map = json.loads((out / "sst2" / "config.json").read_text()).get("auto_map")
        print("auto_map:", json.dumps(auto_map) if auto_map else "none (a model_type that transformers knows)")
    timings["save"] = time.perf_counter() - started

    sentences = ["a charming and often affecting journey.", "unflinchingly bleak and desperate"]
    if args.adapter:
        from peft import AutoPeftModelForSequenceClassification

        started = _step(5, "reload the adapter on the pre-trained encoder with AutoPeftModel, in a fresh process")
        reloaded = reload_in_fresh_process(out / "sst2", sentences, ADAPTER_RELOAD_SCRIPT)
        local = AutoPeftModelForSequenceClassification.from_pretrained(str(out / "sst2")).eval()
    else:
        started = _step(5, "reload with AutoModelForSequenceClassification in a process without hf_plm_ext")
        reloaded = reload_in_fresh_process(out / "sst2", sentences)
        local = AutoModelForSequenceClassification.from_pretrained(str(out / "sst2")).eval()
    batch = AutoTokenizer.from_pretrained(str(out / "sst2"))(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = local(**batch).logits
    max_diff = (expected - torch.tensor(reloaded["logits"])).abs().max().item()
    print(f"loaded as {reloaded['class']}; max |logit difference| vs. this process: {max_diff:.2e}")
    timings["reload"] = time.perf_counter() - started

    table = [
        ("tokenizer", f"wordpiece, {len(tokenizer)} tokens", timings["tokenizer"]),
        ("pre-train", f"{args.objective}, {args.pretrain_steps} steps, held-out loss "
                      f"{pretrained['initial_eval_loss']:.2f} -> {pretrained['final_eval_loss']:.2f}",
         timings["pretrain"]),
        ("fine-tune", f"{args.adapter + ' adapter, ' if args.adapter else ''}SST-2 sample dev accuracy "
                      f"{accuracy:.3f} (200 examples)", timings["finetune"]),
        ("save", f"{len(saved)} files incl. {', '.join(n for n in saved if n.endswith(NOTABLE_FILES)) or 'no code'}",
         timings["save"]),
        ("reload", f"{reloaded['class'] if args.adapter else 'remote code' if auto_map else 'stock transformers'}, "
                   f"max logit diff {max_diff:.1e}", timings["reload"]),
    ]
    _write_report(out, table)
    if max_diff > 1e-4:
        raise RuntimeError(f"the reloaded model disagrees with the saved one (max diff {max_diff})")


def _write_report(out, table):
    report = "| step | result | seconds |\n|---|---|---:|\n" + "".join(
        f"| {step} | {result} | {seconds:.1f} |\n" for step, result, seconds in table)
    (out / "demo_results.md").write_text(report)
    print("\n" + report + f"\nEverything is in {out}")


def run_language_model(objective, args, out):
    """The language-model pipeline: Alice for training, the last 10 % of Frankenstein held out."""
    frankenstein = (DEMO_DATA / "frankenstein.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    cut = int(len(frankenstein) * 0.9)
    (out / "train.txt").write_text("".join(frankenstein[:cut]), encoding="utf-8")
    (out / "held_out.txt").write_text("".join(frankenstein[cut:]), encoding="utf-8")
    corpus = [str(DEMO_DATA / "alice.txt"), str(out / "train.txt")]
    table = []

    started = _step(1, "train a word-level tokenizer (whitespace words, <unk>, <eos>)")
    tokenizer = train_tokenizer(corpus, "words", vocab_size=6000, min_frequency=2, lowercase=True)
    tokenizer.save_pretrained(str(out / "tokenizer"))
    table.append(("tokenizer", f"words, {len(tokenizer)} tokens", time.perf_counter() - started))

    started = _step(2, f"pre-train {objective.demo_model()}")
    pretrain_args = objective.demo_arguments(corpus, str(out / "tokenizer"), str(out / "pretrained"),
                                             validation_corpus=[str(out / "held_out.txt")])
    pretrained = pretrain(pretrain_args, _pretraining_args(objective, args))
    table.append(("pre-train", f"{args.pretrain_steps} steps, {pretrained['num_parameters']:,} parameters, held-out "
                               f"loss {pretrained['initial_eval_loss']:.2f} -> {pretrained['final_eval_loss']:.2f}",
                  time.perf_counter() - started))

    started = _step(3, "held-out perplexity, every token once, without and with memory")
    model = AutoModelForCausalLM.from_pretrained(str(out / "pretrained")).eval()
    perplexities = {}
    for mem_len in (0, 64, 256):
        measured = evaluate_language_model(model, tokenizer, [str(out / "held_out.txt")], tgt_len=64, mem_len=mem_len)
        perplexities[mem_len] = measured["perplexity"]
        print(f"mem_len {mem_len:>3}: perplexity {measured['perplexity']:.2f} over {measured['tokens']} tokens")
    table.append(("perplexity", ", ".join(f"mem {m}: {p:.1f}" for m, p in perplexities.items()),
                  time.perf_counter() - started))

    started = _step(4, "generate with the memory as the cache")
    prompt_text = "alice was beginning to"
    prompt = tokenizer(prompt_text, return_tensors="pt")["input_ids"]
    torch.manual_seed(args.seed)
    # <eos> ends a line of the corpus, not the text: sample through it, as many words as the table says
    generated = model.generate(prompt, max_new_tokens=DEMO_SAMPLED_WORDS, min_new_tokens=DEMO_SAMPLED_WORDS,
                               do_sample=True, top_k=20)
    sampled = generated[0, prompt.shape[1]:]
    print(prompt_text + tokenizer.decode(sampled))
    table.append(("generate", f"{len(sampled)} sampled words after '{prompt_text}'", time.perf_counter() - started))

    started = _step(5, "reload with AutoModelForCausalLM in a process without hf_plm_ext")
    ids = tokenizer((out / "held_out.txt").read_text(encoding="utf-8")[:2000])["input_ids"]
    segments = [ids[i:i + 64] for i in range(0, 192, 64)]
    reloaded = reload_in_fresh_process(out / "pretrained", segments, LM_RELOAD_SCRIPT)
    mems = None
    with torch.no_grad():
        for segment in segments:
            outputs = model(torch.tensor([segment]), mems=mems)
            mems = outputs.mems
    max_diff = (outputs.logits[0, -1] - torch.tensor(reloaded["logits"])).abs().max().item()
    print(f"loaded as {reloaded['class']}; max |logit difference| after 3 segments with memory: {max_diff:.2e}")
    table.append(("reload", f"remote code, max logit diff {max_diff:.1e}", time.perf_counter() - started))
    _write_report(out, table)
    if max_diff > 1e-4:
        raise RuntimeError(f"the reloaded model disagrees with the saved one (max diff {max_diff})")


CSC_SENTENCES = ["我跟我朋有打算去法国玩儿。", "他们的计画是在明天早上出发。", "今天天气很好，我们去公园散步吧。"]


def run_spelling_correction(args, out):
    """Spelling correction: pre-train on the Chinese sample, fine-tune MacBERT4CSC on misspelt copies of it."""
    from hf_plm_ext.csc import CSCFinetuneArguments, SpellingCorrector, finetune_csc
    from hf_plm_ext.training.objectives.macbert import MacBertArguments
    from hf_plm_ext.training.objectives.mlm import TINY_ENCODER

    corpus = [str(DEMO_DATA / "zh" / "zhwiki_sample.txt")]
    table = []
    started = _step(1, "train a WordPiece tokenizer on the embedded Chinese Wikipedia sample")
    tokenizer = train_tokenizer(corpus, "wordpiece", vocab_size=6000)
    tokenizer.save_pretrained(str(out / "tokenizer"))
    table.append(("tokenizer", f"wordpiece, {len(tokenizer)} tokens", time.perf_counter() - started))

    started = _step(2, "pre-train a tiny MacBERT with correction masking (jieba words, Cilin similar words) + SOP")
    objective = OBJECTIVES["macbert"]
    pretrain_args = MacBertArguments(corpus=corpus, tokenizer=str(out / "tokenizer"), output=str(out / "pretrained"),
                                     config_overrides=TINY_ENCODER, max_seq_length=64, similar_words="cilin",
                                     segmenter="jieba")
    pretrained = pretrain(pretrain_args, _pretraining_args(objective, args))
    table.append(("pre-train", f"macbert, {args.pretrain_steps} steps, held-out loss "
                               f"{pretrained['initial_eval_loss']:.2f} -> {pretrained['final_eval_loss']:.2f}",
                  time.perf_counter() - started))

    started = _step(3, "fine-tune for spelling correction on the sample's sentences, misspelt with pycorrector's "
                       "confusion sets")
    csc_args = CSCFinetuneArguments(model=str(out / "pretrained"), output=str(out / "csc"), corpus=corpus,
                                    max_seq_length=64)
    results = finetune_csc(csc_args, _training_args(args.seed, num_train_epochs=args.finetune_epochs,
                                                    per_device_train_batch_size=32, learning_rate=1e-3,
                                                    warmup_steps=10))
    held_out = results["results"][0]
    scores = held_out["metrics"]
    print(f"held-out pairs ({held_out['num_examples']}): sentence-level correction F1 "
          f"{scores['sentence_correction_f1']:.3f}, character-level correction F1 {scores['char_correction_f1']:.3f}, "
          f"false-positive rate {scores['sentence_false_positive_rate']:.3f}")
    table.append(("fine-tune", f"{results['num_train_examples']} pairs; held-out sentence correction F1 "
                               f"{scores['sentence_correction_f1']:.3f}, char {scores['char_correction_f1']:.3f}",
                  time.perf_counter() - started))

    started = _step(4, "correct sentences")
    corrector = SpellingCorrector.from_pretrained(str(out / "csc"))
    for result in corrector(CSC_SENTENCES):
        print(f"{result['source']} -> {result['target']} {result['errors']}")
    table.append(("correct", f"{len(CSC_SENTENCES)} sentences", time.perf_counter() - started))

    started = _step(5, "reload the class the checkpoint's auto_map names, in a process without hf_plm_ext")
    reloaded = reload_in_fresh_process(out / "csc", CSC_SENTENCES, CSC_RELOAD_SCRIPT)
    pipe = corrector.pipeline
    batch = pipe.tokenizer(CSC_SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = pipe.model(**batch.to(pipe.device)).correction_logits.cpu()
    max_diff = (expected - torch.tensor(reloaded["logits"])).abs().max().item()
    print(f"loaded as {reloaded['class']}; max |logit difference| vs. this process: {max_diff:.2e}")
    table.append(("reload", f"remote code, max logit diff {max_diff:.1e}", time.perf_counter() - started))
    _write_report(out, table)
    if max_diff > 1e-4:
        raise RuntimeError(f"the reloaded model disagrees with the saved one (max diff {max_diff})")
