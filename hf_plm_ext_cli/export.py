"""``hf-plm-ext export bert|electra``: a pre-training run as the stock checkpoint type it started from."""

NAME, HELP = "export", "export a pre-training run as a checkpoint that stock transformers loads"


def add_to(export):
    kinds = export.add_subparsers(dest="kind", required=True, metavar="KIND")
    bert = kinds.add_parser("bert", help="a `pretrain macbert` / `pretrain mlm` run as the stock type it started "
                                         "from: 'bert' (also for a fresh run), or 'roberta' / 'xlm-roberta' / "
                                         "'camembert'; with its tokenizer, no auto_map", allow_abbrev=False)
    bert.add_argument("run_dir", metavar="RUN_DIR", help="output folder of `hf-plm-ext pretrain macbert|mlm`")
    bert.add_argument("out_dir", metavar="OUT_DIR", help="new folder")
    bert.set_defaults(handler=run_bert)
    electra = kinds.add_parser("electra", help="a `pretrain electra` run as model_type 'electra', laid out as "
                                               "Google's releases: OUT_DIR/generator and OUT_DIR/discriminator "
                                               "(or one half with --part)", allow_abbrev=False)
    electra.add_argument("--part", choices=("pair", "discriminator", "generator"), default="pair",
                         help="pair (default): both halves in sub-folders; discriminator (for fine-tuning) or "
                              "generator: that half alone in OUT_DIR")
    electra.add_argument("run_dir", metavar="RUN_DIR", help="output folder of `hf-plm-ext pretrain electra`")
    electra.add_argument("out_dir", metavar="OUT_DIR", help="new folder")
    electra.set_defaults(handler=run_electra)


def run_bert(args):
    from transformers import AutoConfig

    from hf_plm_ext.convert.bert import export_bert

    left_out = export_bert(args.run_dir, args.out_dir)
    model_type = AutoConfig.from_pretrained(args.out_dir).model_type
    for what in left_out:
        print(f"left out: {what}")
    print(f"saved {args.run_dir} as a stock {model_type!r} checkpoint to {args.out_dir}")


def run_electra(args):
    from hf_plm_ext.convert.electra import export_electra

    export_electra(args.run_dir, args.out_dir, args.part)
    halves = "the generator and the discriminator" if args.part == "pair" else f"the {args.part}"
    print(f"saved {halves} as stock `electra` checkpoints to {args.out_dir}")
