"""``hf-plm-ext eval lm``: perplexity of a causal language model (with segment memory or without); ``eval csc``:
spelling correction scored as the SIGHAN bake-off defines it."""

import argparse
import json

from hf_plm_ext_cli.arguments import int_at_least, positive_int

NAME, HELP = "eval", "evaluate a model"


def add_to(evaluate):
    kinds = evaluate.add_subparsers(dest="kind", required=True, metavar="KIND")
    lm = kinds.add_parser("lm", help="perplexity (and bits per character) of a causal language model on a text "
                                     "file, every token counted once: transfo-xl carries its memory across "
                                     "segments, rev-lsh (or any causal LM) reads each --tgt-len segment alone",
                          allow_abbrev=False)
    lm.add_argument("--model", required=True, metavar="DIR")
    lm.add_argument("--tokenizer", metavar="DIR", help="default: the model's folder")
    lm.add_argument("--corpus", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    lm.add_argument("--tgt-len", type=int, default=128, help="tokens per segment (default: 128)")
    lm.add_argument("--mem-len", type=int, help="remembered tokens per layer (default: the model's)")
    lm.add_argument("--clamp-len", type=int, help="clamp relative distances (default: the model's; <= 0: none)")
    lm.add_argument("--same-length", action=argparse.BooleanOptionalAction, help="every query sees as many keys "
                                                                  "(default: the model's)")
    lm.add_argument("--batch-size", type=int, default=1, help="parallel streams (default 1: the text read once, in "
                                                                "order)")
    lm.add_argument("--output", metavar="FILE", help="also write the results as JSON (a new file)")
    lm.set_defaults(handler=run_lm)
    csc = kinds.add_parser("csc", help="correct a test file's sources with a spelling-correction model and score "
                                       "them (sentence and character level, SIGHAN's definitions, and "
                                       "pycorrector's)", allow_abbrev=False)
    csc.add_argument("--model", required=True, metavar="DIR")
    csc.add_argument("--test-file", required=True, metavar="FILE", help="source<TAB>target lines or SIGHAN-style "
                                                                        "JSON (e.g. SIGHAN-15 test)")
    csc.add_argument("--output", required=True, metavar="DIR", help="new folder: eval_results.json, "
                                                                    "predictions.tsv, README.md (the card)")
    csc.add_argument("--batch-size", type=positive_int, default=32)
    csc.add_argument("--max-length", type=int_at_least(3), help="tokens per window, [CLS] and [SEP] included "
                     "(default: the model's positions)")
    csc.set_defaults(handler=run_csc)


def run_csc(args):
    from hf_plm_ext.csc.recipe import evaluate_csc
    from hf_plm_ext.checkpoints.results import results_table
    from hf_plm_ext.files import check_new_output

    check_new_output(args.output)
    results = evaluate_csc(args.model, args.test_file, args.output, args.batch_size, args.max_length)
    print(results_table([results]), end="")
    print(f"saved to {args.output}")


def run_lm(args):
    from hf_plm_ext.eval.language_model import evaluate_language_model
    from hf_plm_ext.files import check_new_file, write_new_file

    if args.output:
        check_new_file(args.output)  # refused before the (long) evaluation, like every --output
    results = evaluate_language_model(args.model, args.tokenizer, args.corpus, args.tgt_len, args.mem_len,
                                      args.clamp_len, args.same_length, args.batch_size)
    results["model"] = args.model
    line = f"perplexity {results['perplexity']:.2f} over {results['tokens']} tokens"
    if "bits_per_character" in results:
        line += f", {results['bits_per_character']:.4f} bits per character"
    print(f"{line} (tgt_len {results['tgt_len']}, mem_len {results['mem_len']}, clamp_len {results['clamp_len']}, "
          f"same_length {results['same_length']})")
    if args.output:
        write_new_file(args.output, json.dumps(results, indent=2) + "\n")
