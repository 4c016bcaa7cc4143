"""The ecosystem's own tools on every family, with the real clients: transformers' example-script calls,
``pipeline()``, sentence-transformers, PEFT's defaults and lm-evaluation-harness, on checkpoints this package
writes, with ``import hf_plm_ext`` and in a process where it cannot be imported (``trust_remote_code`` alone)."""

import json
import os
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest
import torch

import hf_plm_ext  # noqa: F401  (registers the families and the spelling-correction pipeline)
from hf_plm_ext import (
    ElectraForRTDPreTraining,
    ElectraRTDConfig,
    MacBertForMaskedLM,
    MacBertForSpellingCorrection,
    RevLSHConfig,
    RevLSHForMaskedLM,
    TransfoXLConfig,
    TransfoXLLMHeadModel,
)
from hf_plm_ext.data.tokenizer_training import train_tokenizer

from conftest import tiny_macbert_config
from ecosystem_clients import run_plan

ALICE = str(files("hf_plm_ext") / "demo_data" / "alice.txt")
CLIENTS_SCRIPT = Path(__file__).with_name("ecosystem_clients.py")
ENCODER_PIPELINES = ["fill-mask", "text-classification", "feature-extraction"]
CAUSAL_PIPELINES = ["text-generation", "text-classification", "feature-extraction"]
# checkpoint -> the clients that apply to it (a client's arguments after the path)
PLAN = {
    "macbert": {"run_glue": [], "run_mlm": [], "pipelines": [ENCODER_PIPELINES], "sentence_transformers": []},
    "electra-rtd": {"run_glue": [], "pipelines": [["text-classification", "feature-extraction"]],
                    "sentence_transformers": []},
    "transfo-xl": {"run_glue": [], "run_clm": [], "pipelines": [CAUSAL_PIPELINES], "sentence_transformers": []},
    "transfo-xl-adaptive": {"run_clm": []},
    "rev-lsh": {"run_glue": [], "run_mlm": [], "pipelines": [ENCODER_PIPELINES], "sentence_transformers": []},
    "rev-lsh-causal": {"run_glue": [], "run_clm": [], "pipelines": [CAUSAL_PIPELINES], "sentence_transformers": []},
    "k-adapter": {"run_glue": [], "pipelines": [["text-classification", "feature-extraction"]],
                  "sentence_transformers": []},
    "csc": {"pipelines": [["spelling-correction", "fill-mask"]]},
}
WIDTHS = {"macbert": 32, "electra-rtd": 128, "transfo-xl": 128, "rev-lsh": 32, "rev-lsh-causal": 32, "k-adapter": 32}
CLASSIFIERS = {"macbert": "MacBertForSequenceClassification", "electra-rtd": "ElectraRTDForSequenceClassification",
               "transfo-xl": "TransfoXLForSequenceClassification", "rev-lsh": "RevLSHForSequenceClassification",
               "rev-lsh-causal": "RevLSHForSequenceClassification", "k-adapter": "KAdapterForSequenceClassification"}


def cli(*argv):
    from hf_plm_ext_cli.main import main

    main([str(a) for a in argv])


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, english_tokenizer_dir, shared_data):
    """One checkpoint per family (and variant), as this package writes them: the causal language models and the
    K-Adapter by the command line, the others saved from a tiny config with their tokenizer."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("ecosystem")
    wordpiece = AutoTokenizer.from_pretrained(english_tokenizer_dir)
    words, byte_level = root / "words", root / "bpe"
    train_tokenizer([ALICE], "words", vocab_size=2000).save_pretrained(str(words))
    train_tokenizer([ALICE], "bpe", vocab_size=1500).save_pretrained(str(byte_level))  # the causal recipe's kind
    chinese = train_tokenizer([str(shared_data / "corpus/zh/zhwiki_bert_sampled.txt")], "wordpiece",
                              vocab_size=3000, model_max_length=64)

    def save(name, model, tokenizer):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(str(root / name))

    torch.manual_seed(0)
    save("macbert", MacBertForMaskedLM(tiny_macbert_config(vocab_size=len(wordpiece))), wordpiece)
    save("electra-rtd", ElectraForRTDPreTraining(ElectraRTDConfig.from_size(
        "tiny", vocab_size=len(wordpiece), mask_token_id=wordpiece.mask_token_id)), wordpiece)
    save("transfo-xl-adaptive", TransfoXLLMHeadModel(TransfoXLConfig.from_size(
        "tiny", vocab_size=len(AutoTokenizer.from_pretrained(words)), cutoffs=[500, 1000], adaptive=True,
        div_val=2)), AutoTokenizer.from_pretrained(words))
    save("rev-lsh", RevLSHForMaskedLM(RevLSHConfig.from_size("tiny", vocab_size=len(wordpiece))), wordpiece)
    save("csc", MacBertForSpellingCorrection(tiny_macbert_config(vocab_size=len(chinese))), chinese)
    common = ["--max_steps", 1, "--per_device_train_batch_size", 2, "--disable_tqdm", "true", "--save_strategy",
              "no", "--report_to", "none"]
    cli("pretrain", "transfo-xl", "--corpus", ALICE, "--tokenizer", words, "--size", "tiny", "--tgt-len", 16,
        "--mem-len", 16, "--output", root / "transfo-xl", *common)
    cli("pretrain", "rev-lsh", "--corpus", ALICE, "--tokenizer", byte_level, "--size", "tiny", "--causal",
        "true", "--max_seq_length", 64, "--output", root / "rev-lsh-causal", *common)
    cli("k-adapter", "new", "--backbone", root / "macbert", "--adapters", "factual", "--output", root / "k-adapter")
    return root


def plan_for(root):
    return {name: {"path": str(root / name), "clients": clients} for name, clients in PLAN.items()}


@pytest.fixture(scope="module")
def without_the_package(checkpoints, tmp_path_factory):
    """Every client on every checkpoint in one process where ``import hf_plm_ext`` fails."""
    work = tmp_path_factory.mktemp("clients")
    (work / "plan.json").write_text(json.dumps(plan_for(checkpoints)))
    env = {**os.environ, "PYTHONPATH": str(CLIENTS_SCRIPT.parent)}
    proc = subprocess.run([sys.executable, str(CLIENTS_SCRIPT), work / "plan.json", work / "report.json"],
                          capture_output=True, text=True, cwd=work, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((work / "report.json").read_text())


@pytest.fixture(scope="module")
def with_the_package(checkpoints):
    return run_plan(plan_for(checkpoints), trust=False)


def check_report(report):
    """What every client must have done, checkpoint by checkpoint (the README's table)."""
    for name, clients in report.items():
        for client, result in clients.items():
            if name == "transfo-xl-adaptive":
                continue
            assert "error" not in result, (name, client, result)
            if client == "pipelines":
                for task, output in result.items():
                    assert "error" not in output, (name, task, output)
    for name in PLAN:
        clients = report[name]
        if "run_glue" in clients:
            assert clients["run_glue"]["model_class"] == CLASSIFIERS[name]
        for script in ("run_mlm", "run_clm"):
            if script in clients and name != "transfo-xl-adaptive":
                before, after = clients[script]["rows"]
                assert after == before + 1, (name, script)  # resized to the grown tokenizer
                assert clients[script]["loss"] > 0
        if "sentence_transformers" in clients:
            st = clients["sentence_transformers"]
            assert st["dimension"] == st["width"] == WIDTHS[name], name
            assert st["same_after_reload"], name
        pipes = clients.get("pipelines", {})
        if "fill-mask" in pipes:
            assert len(pipes["fill-mask"]["top"]) == 5
        if "text-classification" in pipes:
            assert len(pipes["text-classification"]["labels"]) == 4
        if "text-generation" in pipes:
            assert pipes["text-generation"] == {"starts_with_prompt": True, "longer": True}, name
        if "feature-extraction" in pipes:
            assert pipes["feature-extraction"]["width"] == WIDTHS[name], name
    corrected = report["csc"]["pipelines"]["spelling-correction"]
    sources = [row["source"] for row in corrected["out"]]
    assert corrected["class"] == "SpellingCorrectionPipeline" and sources == ["我跟我朋唷打算去法国玩儿。", "hello 42"]
    assert corrected["out"][1] == {"source": "hello 42", "target": "hello 42", "errors": []}
    assert all(len(row["target"]) == len(row["source"]) for row in corrected["out"])
    # an adaptive embedding (one table per cluster) has no single weight: the error says what it has instead
    error = report["transfo-xl-adaptive"]["run_clm"]["error"]
    assert error.startswith("AttributeError") and "transfo-xl's adaptive input embedding" in error
    assert "num_embeddings" in error and "resize_token_embeddings" in error


def test_the_clients_work_without_the_package(without_the_package):
    check_report(without_the_package)


def test_the_clients_work_with_the_package(with_the_package):
    check_report(with_the_package)


def test_the_spelling_pipeline_corrects_as_the_corrector(checkpoints):
    from transformers import pipeline

    from hf_plm_ext import SpellingCorrector

    texts = ["我跟我朋唷打算去法国玩儿。" * 8, "下个星期，我跟我朋有打算去法国玩儿。ABC 123"]  # the first in windows
    pipe = pipeline("spelling-correction", model=str(checkpoints / "csc"), batch_size=2)
    assert pipe(texts, max_length=16) == SpellingCorrector.from_pretrained(str(checkpoints / "csc"), max_length=16)(texts)
    config = json.loads((checkpoints / "csc" / "config.json").read_text())
    assert config["custom_pipelines"]["chinese-spelling-correction"]["impl"] == \
        "pipeline_spelling_correction.SpellingCorrectionPipeline"
    assert (checkpoints / "csc" / "pipeline_spelling_correction.py").is_file()


@pytest.mark.parametrize("name", ["macbert", "electra-rtd", "transfo-xl", "rev-lsh", "rev-lsh-causal", "k-adapter"])
def test_peft_lora_finds_its_targets_in_every_family(name, checkpoints, tmp_path):
    """``LoraConfig(task_type="SEQ_CLS")`` without target_modules or modules_to_save, as PEFT users write it for
    BERT: PEFT trains the adapter and the classifier, found by its usual name (``classifier`` / ``score``), and
    nothing of the backbone; it saves and reloads them."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = checkpoints / name
    tokenizer = AutoTokenizer.from_pretrained(path)

    def classifier():
        torch.manual_seed(0)  # the new head starts the same at every load
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)

    model = get_peft_model(classifier(), LoraConfig(task_type="SEQ_CLS"))
    trainable = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    trained_head = [n for n in trainable if "lora_" not in n]
    assert trained_head and all(".modules_to_save." in n for n in trained_head), (name, trained_head)
    assert all(any(f".{head}." in n for head in ("classifier", "score")) for n in trained_head), name
    total = sum(p.numel() for p in model.parameters())
    # (at these widths, 32, PEFT's default r = 8 is half of each matrix it adapts: the adapter is small, not tiny)
    assert sum(trainable.values()) <= 0.1 * total, (name, sum(trainable.values()), total)
    lora_layers = [n for n, _ in model.named_modules() if n.endswith("lora_A.default")]
    assert lora_layers, name
    inputs = tokenizer(["the rabbit ran", "a cat"], padding=True, return_tensors="pt")
    out = model(**inputs, labels=torch.tensor([0, 1]))
    out.loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if "lora_" in n and p.requires_grad)
    torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0).step()
    model.save_pretrained(tmp_path)  # the adapter and the trained head (PEFT's modules_to_save)
    model.eval()
    reloaded = PeftModel.from_pretrained(classifier(), tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs).logits, model(**inputs).logits)
        with model.disable_adapter():  # what the adapter and the trained head changed
            assert not torch.allclose(model(**inputs).logits, reloaded(**inputs).logits)


def test_lm_eval_harness_scores_a_causal_folder_without_the_package(checkpoints, tmp_path):
    """``lm_eval --model hf`` (loglikelihood, generation until eos, rolling perplexity) on local tasks."""
    lines = [line.strip() for line in Path(ALICE).read_text(encoding="utf-8").splitlines() if len(line.split()) > 8]
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    rows = {"choice": [{"question": " ".join(line.split()[:-1]), "choices": [line.split()[-1], "rabbit"],
                        "answer": 0} for line in lines[:4]],
            "generate": [{"prompt": " ".join(line.split()[:5]), "target": line.split()[5]} for line in lines[:4]],
            "text": [{"text": line} for line in lines[4:8]]}
    for name, records in rows.items():
        (tasks / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    task_yaml = {
        "choice": ('output_type: multiple_choice\ndoc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\n'
                   'doc_to_target: "{{answer}}"\nmetric_list:\n  - metric: acc\n'),
        "generate": ('output_type: generate_until\ndoc_to_text: "{{prompt}}"\ndoc_to_target: "{{target}}"\n'
                     'generation_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 4\n  do_sample: false\n'
                     'metric_list:\n  - metric: exact_match\n'),
        "text": 'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n'
                'metric_list:\n  - metric: word_perplexity\n',
    }
    for name, body in task_yaml.items():
        (tasks / f"{name}.yaml").write_text(f"task: hfplm_{name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                                            f"    test: {tasks / name}.jsonl\ntest_split: test\n{body}")
    code = ("import sys; sys.modules['hf_plm_ext'] = None\n"
            "from lm_eval.__main__ import cli_evaluate\n"
            "sys.argv = ['lm_eval'] + sys.argv[1:]\n"
            "cli_evaluate()\n")
    for name in ("rev-lsh-causal", "transfo-xl"):
        out = tmp_path / f"results-{name}"
        proc = subprocess.run([sys.executable, "-c", code, "--model", "hf", "--model_args",
                               f"pretrained={checkpoints / name},trust_remote_code=True", "--tasks",
                               "hfplm_choice,hfplm_generate,hfplm_text", "--include_path", str(tasks), "--device",
                               "cpu", "--batch_size", "2", "--output_path", str(out)],
                              capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert proc.returncode == 0, (name, proc.stderr[-4000:])
        results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
        assert 0.0 <= results["hfplm_choice"]["acc,none"] <= 1.0
        assert "exact_match,none" in results["hfplm_generate"]
        assert results["hfplm_text"]["word_perplexity,none"] > 1.0


def test_finetune_glue_pads_a_causal_tokenizer_with_eos(checkpoints, tmp_path, shared_data):
    """A Transformer-XL with a words tokenizer (no pad token of its own): padded with its eos, the classifier
    pooling each row's last token; the pad is recorded in the saved config and tokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    cli("finetune", "glue", "--task", "sst2", "--model", checkpoints / "transfo-xl", "--data-dir",
        shared_data / "glue/SST-2", "--max_train_samples", 16, "--max_steps", 2, "--per_device_train_batch_size", 4,
        "--output", tmp_path / "sst2", "--disable_tqdm", "true", "--report_to", "none")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "sst2")
    assert tokenizer.pad_token == tokenizer.eos_token == "<eos>"
    assert AutoConfig.from_pretrained(tmp_path / "sst2").pad_token_id == tokenizer.eos_token_id
    assert json.loads((tmp_path / "sst2" / "eval_results.json").read_text())["results"]


def test_pretraining_takes_the_special_tokens_from_its_tokenizer(checkpoints):
    """What lm-eval and generation read: a causal rev-lsh's bos / eos are its blocks' [CLS] / [SEP]."""
    from transformers import AutoConfig, AutoTokenizer

    for name in ("rev-lsh-causal", "transfo-xl"):
        config = AutoConfig.from_pretrained(checkpoints / name)
        tokenizer = AutoTokenizer.from_pretrained(checkpoints / name)
        assert tokenizer.eos_token is not None
        assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == \
            (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id), name
    tokenizer = AutoTokenizer.from_pretrained(checkpoints / "rev-lsh-causal")
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("[CLS]", "[SEP]")


def test_finetune_glue_refuses_a_tokenizer_with_nothing_to_pad_with(tmp_path, shared_data, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from conftest import run_cli

    backend = Tokenizer(models.WordLevel({"<unk>": 0, "the": 1, "film": 2}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>").save_pretrained(str(tmp_path / "xl"))
    TransfoXLLMHeadModel(TransfoXLConfig.from_size("tiny", vocab_size=3)).save_pretrained(tmp_path / "xl")
    capsys.readouterr()  # (the save's progress bar)
    code, _, stderr = run_cli(["finetune", "glue", "--task", "sst2", "--model", tmp_path / "xl", "--data-dir",
                               shared_data / "glue/SST-2", "--output", tmp_path / "out"], capsys)
    assert code == 2 and "neither a pad nor an eos token" in stderr and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["rev-lsh-causal", "transfo-xl"])
def test_text_generation_streams_what_it_returns_and_stops_at_a_stop_string(name, checkpoints, capsys):
    """``pipeline("text-generation")`` with a ``TextStreamer`` prints the text it returns; lm-eval's stopping
    criteria (its ``generate_until``'s ``until``) end generation at the first token that completes the stop.
    (transformers' own ``stop_strings`` cannot read a word-level vocabulary: it probes each token after "abcdef",
    which such a tokenizer maps to its unknown token.)"""
    from lm_eval.models.utils_hf import stop_sequences_criteria
    from transformers import TextStreamer, pipeline

    generate = pipeline("text-generation", model=str(checkpoints / name))
    tokenizer, model = generate.tokenizer, generate.model
    capsys.readouterr()
    text = generate("the rabbit", max_new_tokens=8, min_new_tokens=8, do_sample=False, return_full_text=False,
                    streamer=TextStreamer(tokenizer, skip_prompt=True))[0]["generated_text"]
    assert text.strip() and capsys.readouterr().out.strip() == text.strip()
    prompt = tokenizer("the rabbit", return_tensors="pt")
    full = model.generate(**prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)[0]
    new = full[prompt["input_ids"].shape[1]:]
    stop = tokenizer.decode(new[:3]).split()[-1]  # a whole word
    first = next(i for i in range(len(new)) if stop in tokenizer.decode(new[:i + 1]))
    length = prompt["input_ids"].shape[1]
    stopped = model.generate(**prompt, max_new_tokens=8, do_sample=False,
                             stopping_criteria=stop_sequences_criteria(tokenizer, [stop], length, 1))[0]
    assert torch.equal(stopped, full[:length + first + 1]), (stop, tokenizer.decode(new))
    if name == "rev-lsh-causal":  # a byte-level vocabulary: transformers' stop_strings, with generate's tokenizer=
        assert torch.equal(model.generate(**prompt, max_new_tokens=8, do_sample=False, stop_strings=[stop],
                                          tokenizer=tokenizer)[0], stopped)


@pytest.mark.parametrize("name", ["rev-lsh-causal", "transfo-xl"])
def test_continuations_read_as_in_the_whole_text_in_pipelines_and_lm_eval(name, checkpoints):
    """What ``pipeline("text-generation")`` returns and lm-eval's ``generate_until`` reads are the new tokens decoded
    alone: they read as in the whole text (no space lost between prompt and continuation, no ``##`` piece)."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import pipeline

    generate = pipeline("text-generation", model=str(checkpoints / name))
    tokenizer, model = generate.tokenizer, generate.model
    prompt = "the queen said"
    ids = tokenizer(prompt, return_tensors="pt")
    full = model.generate(**ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)[0]
    length = ids["input_ids"].shape[1]
    whole = tokenizer.decode(full, skip_special_tokens=True)
    alone = tokenizer.decode(full[length:], skip_special_tokens=True)
    assert whole == tokenizer.decode(full[:length], skip_special_tokens=True) + alone and "##" not in alone
    text = generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)[0]["generated_text"]
    assert text == prompt + alone
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=1, device="cpu")
    request = Instance(request_type="generate_until", doc={}, idx=0,
                       arguments=(prompt, {"until": ["\n\n"], "max_gen_toks": 6, "do_sample": False}))
    continuation = lm.generate_until([request])[0]
    context = torch.tensor([lm.tok_encode(prompt)])  # what lm-eval feeds
    generated = model.generate(context, attention_mask=torch.ones_like(context), max_new_tokens=6, do_sample=False)[0]
    whole = tokenizer.decode(generated)
    assert continuation == whole[len(tokenizer.decode(context[0])):] and "##" not in continuation, continuation


@pytest.mark.parametrize("name", ["transfo-xl", "rev-lsh-causal"])
def test_batched_generation_left_pads_and_gives_each_row_its_own_text(name, checkpoints):
    """lm-eval's ``generate_until`` at ``batch_size`` 1, 2 and 8 (its batches pad on the left) and
    ``pipeline("text-generation", batch_size=3)``: the same continuations as one prompt at a time."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from transformers import pipeline

    generate = pipeline("text-generation", model=str(checkpoints / name))
    model, tokenizer = generate.model, generate.tokenizer
    prompts = ["the rabbit", "alice was beginning to get very tired of", "she", "down , down , down . would the fall",
               "the queen said", "curiouser and"]
    texts = {}
    for batch_size in (1, 2, 8):
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device="cpu")
        requests = [Instance(request_type="generate_until", doc={}, idx=i,
                             arguments=(prompt, {"until": ["\n\n"], "max_gen_toks": 5, "do_sample": False}))
                    for i, prompt in enumerate(prompts)]
        texts[batch_size] = lm.generate_until(requests)
    assert texts[2] == texts[1] and texts[8] == texts[1], texts
    options = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, return_full_text=False)
    one_by_one = [generate(prompt, **options)[0]["generated_text"] for prompt in prompts]
    tokenizer.padding_side = "left"
    batched = [out[0]["generated_text"] for out in generate(prompts, batch_size=3, **options)]
    assert batched == one_by_one
