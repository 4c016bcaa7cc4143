from conftest import run_cli


def test_demo_runs_end_to_end_and_reloads_with_remote_code(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, stderr = run_cli(["demo", "--output", out, "--pretrain-steps", 20, "--finetune-epochs", 1], capsys)
    assert code == 0, stderr[-3000:]
    for step in range(1, 6):
        assert f"step {step}/5" in stdout
    assert "transformers_modules" in stdout  # reloaded from the saved code, not the installed package
    report = (out / "demo_results.md").read_text()
    assert "| reload | remote code, max logit diff" in report
    assert {"tokenizer", "pretrained", "sst2"} <= {p.name for p in out.iterdir()}
    assert (out / "sst2" / "modeling_macbert.py").is_file()


def test_demo_with_a_pfeiffer_adapter_saves_it_alone_and_reloads_it_on_the_encoder(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, stderr = run_cli(["demo", "--adapter", "pfeiffer", "--output", out, "--pretrain-steps", 10,
                                    "--finetune-epochs", 1], capsys)
    assert code == 0, stderr[-3000:]
    saved = {p.name for p in (out / "sst2").iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors"} <= saved and "model.safetensors" not in saved
    report = (out / "demo_results.md").read_text()
    assert "| fine-tune | pfeiffer adapter, SST-2 sample dev accuracy" in report
    assert "| reload | PEFT BOTTLENECK on MacBertForSequenceClassification, max logit diff" in report


def test_demo_with_electra_fine_tunes_the_exported_discriminator(tmp_path, capsys):
    import json

    out = tmp_path / "demo"
    code, stdout, stderr = run_cli(["demo", "--objective", "electra", "--output", out, "--pretrain-steps", 10,
                                    "--finetune-epochs", 1], capsys)
    assert code == 0, stderr[-3000:]
    assert json.loads((out / "discriminator" / "config.json").read_text())["model_type"] == "electra"
    assert json.loads((out / "sst2" / "config.json").read_text())["architectures"] == \
        ["ElectraForSequenceClassification"]
    assert "| reload | stock transformers, max logit diff" in (out / "demo_results.md").read_text()


def test_demo_with_transfo_xl_measures_perplexity_with_memory_and_reloads(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, stderr = run_cli(["demo", "--objective", "transfo-xl", "--output", out, "--pretrain-steps", 10],
                                   capsys)
    assert code == 0, stderr[-3000:]
    for mem_len in (0, 64, 256):
        assert f"mem_len {mem_len:>3}: perplexity" in stdout
    assert "TransfoXLLMHeadModel; max |logit difference| after 3 segments with memory: 0.00e+00" in stdout
    sample = stdout.split("generate with the memory as the cache ===\n")[1].splitlines()[0]
    assert sample.startswith("alice was beginning to ") and len(sample.split()) == 4 + 30  # <eos> did not stop it
    assert "| generate | 30 sampled words after 'alice was beginning to' |" in (out / "demo_results.md").read_text()
    assert (out / "pretrained" / "modeling_transfo_xl.py").is_file()
    assert "| reload | remote code, max logit diff" in (out / "demo_results.md").read_text()


def test_demo_with_rev_lsh_fine_tunes_a_reversible_lsh_encoder_and_reloads_it(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, stderr = run_cli(["demo", "--objective", "rev-lsh", "--output", out, "--pretrain-steps", 10,
                                    "--finetune-epochs", 1], capsys)
    assert code == 0, stderr[-3000:]
    assert "RevLSHForSequenceClassification; max |logit difference| vs. this process: 0.00e+00" in stdout
    assert (out / "sst2" / "attention_rev_lsh.py").is_file()  # the family's sibling file travels with it


def test_demo_of_spelling_correction_pretrains_fine_tunes_corrects_and_reloads(tmp_path, capsys):
    out = tmp_path / "demo"
    code, stdout, stderr = run_cli(["demo", "--objective", "csc", "--output", out, "--pretrain-steps", 10,
                                    "--finetune-epochs", 0.2], capsys)
    assert code == 0, stderr[-3000:]
    assert "MacBertForSpellingCorrection; max |logit difference| vs. this process: 0.00e+00" in stdout
    assert "我跟我朋有打算去法国玩儿。 -> " in stdout
    results = (out / "demo_results.md").read_text()
    assert "| fine-tune | " in results and "held-out sentence correction F1" in results
    assert (out / "csc" / "modeling_macbert.py").is_file()
