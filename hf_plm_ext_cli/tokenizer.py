"""``hf-plm-ext tokenizer train``."""

import json

NAME, HELP = "tokenizer", "train tokenizers"
KINDS = ("wordpiece", "bpe", "wordlevel", "unigram", "words", "chars")  # hf_plm_ext.data.tokenizer_training's


def add_to(tokenizer):
    actions = tokenizer.add_subparsers(dest="action", required=True, metavar="ACTION")
    train = actions.add_parser("train", help="train a tokenizer on text files; AutoTokenizer loads the output",
                               allow_abbrev=False)
    train.add_argument("--corpus", nargs="+", required=True, metavar="FILE", help="UTF-8 text files")
    train.add_argument("--kind", choices=KINDS, default="wordpiece",
                       help="bpe (byte-level), words and chars: for causal language models, whose continuations "
                            "decode alone as in the whole text; words and chars: Transformer-XL's (default: "
                            "wordpiece)")
    train.add_argument("--vocab-size", type=int, default=8000, help="tokens in the vocabulary, the special ones included (default: 8000)")
    train.add_argument("--min-frequency", type=int, default=2, help="fewest occurrences of a token kept (default: 2)")
    train.add_argument("--no-lowercase", dest="lowercase", action="store_false",
                       help="keep case and accents (default: lower-case and strip accents, like BERT uncased)")
    train.add_argument("--model-max-length", type=int, help="longest input the tokenizer accepts without a warning "
                                                            "(default: 512; words and chars: unlimited)")
    train.add_argument("--output", required=True, metavar="DIR", help="new directory")
    train.set_defaults(handler=run_train)


def run_train(args):
    from hf_plm_ext.data.tokenizer_training import train_tokenizer
    from hf_plm_ext.files import check_new_output, staged_output

    check_new_output(args.output)
    tok = train_tokenizer(args.corpus, args.kind, args.vocab_size, args.min_frequency, args.lowercase,
                          args.model_max_length)
    with staged_output(args.output) as staging:
        tok.save_pretrained(str(staging))
        settings = {k: getattr(args, k) for k in ("corpus", "kind", "vocab_size", "min_frequency", "lowercase")}
        (staging / "tokenizer_training.json").write_text(json.dumps(settings, indent=2) + "\n")
    print(f"trained a {args.kind} tokenizer with {len(tok)} tokens; saved to {args.output}")
