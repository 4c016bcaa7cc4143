"""``hf-plm-ext corpus prepare``: a corpus tokenised once into a token store (``hf_plm_ext.data.token_store``)."""

from hf_plm_ext_cli.arguments import positive_int

NAME, HELP = "corpus", "tokenise a corpus once into a token store that `pretrain --data` reads"


def add_to(corpus):
    actions = corpus.add_subparsers(dest="action", required=True, metavar="ACTION")
    prepare = actions.add_parser(
        "prepare", allow_abbrev=False,
        help="tokenise text, .jsonl(.gz) or .parquet files in parallel (datatrove's executors: this machine's cores, "
             "a Slurm job array or a Ray cluster) into uint16/uint32 ids with document, sentence and word boundaries")
    prepare.add_argument("--corpus", nargs="+", required=True, metavar="PATH",
                         help="files, folders (every file in them) or globs; .jsonl / .jsonl.gz and .parquet are "
                              "read as records, anything else as UTF-8 text")
    prepare.add_argument("--tokenizer", required=True, metavar="DIR", help="a tokenizer folder with tokenizer.json")
    prepare.add_argument("--output", required=True, metavar="STORE", help="new folder for the store")
    prepare.add_argument("--workers", type=positive_int, default=1, help="tasks run at once (default: 1)")
    prepare.add_argument("--executor", choices=("local", "slurm", "ray"), default="local",
                         help="local: this machine; slurm: a job array (sbatch), returns once submitted; ray: the "
                              "cluster at RAY_ADDRESS, or a local one (default: local)")
    prepare.add_argument("--documents", choices=("lines", "paragraphs"), default="lines",
                         help="text files: a document per line, or per blank-line-separated paragraph "
                              "(default: lines, as `pretrain --corpus` reads text)")
    prepare.add_argument("--text-field", default="text", help="the records' field (.jsonl) or column (.parquet) "
                                                              "that holds the text (default: text)")
    prepare.add_argument("--sentences", action="store_true",
                         help="record sentence starts (SOP pairs: `pretrain macbert`)")
    prepare.add_argument("--words", action="store_true",
                         help="record word starts, from the tokenizer's pre-tokenisation (whole-word masking)")
    prepare.add_argument("--segmenter", choices=("jieba",),
                         help="record word starts from this segmenter instead (Chinese); implies --words")
    prepare.add_argument("--piece-megabytes", type=positive_int,
                         help="a plain-text file is cut into tasks of about this size (default: 32)")
    prepare.add_argument("--slurm-partition", help="--executor slurm: the partition")
    prepare.add_argument("--slurm-time", help="--executor slurm: each task's time limit, e.g. 2:00:00")
    prepare.set_defaults(handler=run_prepare)


def run_prepare(args):
    from hf_plm_ext.data.token_store.prepare import prepare_corpus

    manifest = prepare_corpus(args)
    if manifest is None:
        print(f"submitted to Slurm; the store appears at {args.output} when the jobs end (logs beside it)")
        return
    print(f"{manifest['tokens']:,} tokens in {manifest['documents']:,} documents ({manifest['dtype']}, "
          f"{', '.join(manifest['boundaries'])}); saved to {args.output}")
