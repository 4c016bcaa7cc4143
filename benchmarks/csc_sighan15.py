"""Real check of Chinese spelling correction (issue 24, item 5): MacBERT4CSC fine-tuning of a Chinese MacBERT
pre-trained here with correction masking against the same model pre-trained with ``[MASK]``, scored on SIGHAN-15.

One WordPiece tokenizer on ../shared/data/corpus/zh; two small ``macbert`` models pre-trained for the same steps,
seed and data (jieba words, N-gram whole-word masking, MLM + SOP) that differ only in ``--masking correction
--similar_words cilin`` vs ``--masking mask``; each fine-tuned by ``hf-plm-ext finetune csc`` on the same pairs
(the corpus sentences misspelt with pycorrector's confusion sets, same seed) and scored by ``hf-plm-ext eval csc``
on SIGHAN-15 test (1,100 sentences). pycorrector's published figures for ``macbert4csc-base-chinese`` (a 102 M
parameter MacBERT-base pre-trained by HFL, fine-tuned on SIGHAN + Wang271K) are printed beside them.

    .venv/bin/python benchmarks/csc_sighan15.py [--pretrain-steps 2000] [--finetune-epochs 2]
        [--max-train-pairs N] [--work DIR]

Every step is an ``hf-plm-ext`` command (printed, and written to the results with its time); a step whose output
folder exists is not rerun. Writes benchmarks/results/csc_sighan15.json and .md.
"""

import argparse
import json
from pathlib import Path

from _common import DATA, RESULTS, run_cli

ZH_CORPUS = [str(DATA / "corpus" / "zh" / name) for name in ("zhwiki_bert_sampled.txt",
                                                             "CLUECorpusSmall_bert_sampled.txt")]
SIGHAN15 = DATA / "csc" / "sighan15"
SMALL = "hidden_size=256,num_hidden_layers=4,num_attention_heads=4,intermediate_size=1024"
# shibing624/pycorrector examples/macbert/README.md (reference-algorithms.md, section 2.3)
PUBLISHED = {"char_correction_precision": 0.9372, "char_correction_recall": 0.8640, "char_correction_f1": 0.8991,
             "pycorrector_sentence_precision": 0.8264, "pycorrector_sentence_recall": 0.7366,
             "pycorrector_sentence_f1": 0.7789}
SHOWN = [("sentence_detection_f1", "sent. det. F1"), ("sentence_correction_precision", "sent. cor. P"),
         ("sentence_correction_recall", "sent. cor. R"), ("sentence_correction_f1", "sent. cor. F1"),
         ("sentence_false_positive_rate", "FPR"), ("char_detection_f1", "char det. F1"),
         ("char_correction_f1", "char cor. F1"), ("pycorrector_sentence_f1", "pycorrector sent. F1")]




def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-steps", type=int, default=2000)
    parser.add_argument("--finetune-epochs", default="2")
    parser.add_argument("--max-train-pairs", help="fine-tune on the first N generated pairs only")
    parser.add_argument("--work", default="/tmp/csc-sighan15")
    parser.add_argument("--smoke", type=int, help="every training this many steps (results not written)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log_file = work / "commands.json"
    log = json.loads(log_file.read_text()) if log_file.is_file() else {}
    steps = str(args.smoke or args.pretrain_steps)
    smoke = ["--max_steps", str(args.smoke)] if args.smoke else []

    tokenizer = work / "zh-tokenizer"
    run_cli(["tokenizer", "train", "--corpus", *ZH_CORPUS, "--vocab-size", "8000", "--output", str(tokenizer)], log,
            tokenizer, done_file=None)
    pretrain_common = ["--corpus", *ZH_CORPUS, "--tokenizer", str(tokenizer), "--segmenter", "jieba",
                       "--config_overrides", SMALL, "--max_seq_length", "64", "--max_steps", steps,
                       "--per_device_train_batch_size", "32", "--learning_rate", "5e-4", "--warmup_steps", "0.1",
                       "--weight_decay", "0.01", "--logging_steps", "100", "--seed", "0", "--disable_tqdm", "true"]
    finetune_common = ["--corpus", *ZH_CORPUS, "--max_seq_length", "64", "--num_train_epochs", args.finetune_epochs,
                       "--per_device_train_batch_size", "32", "--learning_rate", "3e-4", "--warmup_steps", "0.06",
                       "--weight_decay", "0.01", "--logging_steps", "200", "--seed", "0", "--disable_tqdm", "true",
                       *(["--max_train_samples", args.max_train_pairs] if args.max_train_pairs else []), *smoke]
    results = {}
    for masking in ("correction", "mask"):
        pretrained = work / f"pretrained-{masking}"
        extra = ["--similar_words", "cilin"] if masking == "correction" else []
        run_cli(["pretrain", "macbert", *pretrain_common, "--masking", masking, *extra, "--output", str(pretrained)],
            log, pretrained, done_file=None)
        log_file.write_text(json.dumps(log, indent=2) + "\n")
        csc = work / f"csc-{masking}"
        run_cli(["finetune", "csc", "--model", str(pretrained), *finetune_common, "--output", str(csc)], log, csc,
                done_file=None)
        log_file.write_text(json.dumps(log, indent=2) + "\n")
        scored = work / f"sighan15-{masking}"
        run_cli(["eval", "csc", "--model", str(csc), "--test-file", str(SIGHAN15 / "test.json"), "--output",
                 str(scored)], log, scored, done_file=None)
        log_file.write_text(json.dumps(log, indent=2) + "\n")
        trained = json.loads((csc / "eval_results.json").read_text())
        results[masking] = {
            "pretrain_final_eval_loss": json.loads((pretrained / "pretrain_results.json").read_text())[
                "final_eval_loss"],
            "csc_train_pairs": trained["num_train_examples"], "csc_sub_losses": trained["sub_losses"],
            "held_out": trained["results"][0]["metrics"],
            "sighan15": json.loads((scored / "eval_results.json").read_text())["results"][0]["metrics"],
        }
    header = "| model | " + " | ".join(label for _, label in SHOWN) + " |"
    lines = [header, "|---|" + "---:|" * len(SHOWN)]
    for masking, row in results.items():
        lines.append(f"| pre-trained here, `--masking {masking}` | " +
                     " | ".join(f"{100 * row['sighan15'][name]:.2f}" for name, _ in SHOWN) + " |")
    lines.append("| pycorrector's macbert4csc-base-chinese (published) | " +
                 " | ".join(f"{100 * PUBLISHED[name]:.2f}" if name in PUBLISHED else "" for name, _ in SHOWN) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    if not args.smoke:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "csc_sighan15.json").write_text(json.dumps(
            {"results": results, "published": PUBLISHED, "model": SMALL, "pretrain_steps": args.pretrain_steps,
             "commands": list(log.values())}, indent=2, ensure_ascii=False) + "\n")
        (RESULTS / "csc_sighan15.md").write_text(table)


if __name__ == "__main__":
    main()
