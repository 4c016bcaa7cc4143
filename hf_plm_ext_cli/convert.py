"""``hf-plm-ext convert reformer SRC OUT``: checkpoints of other implementations as this package's families."""

NAME, HELP = "convert", "convert another implementation's checkpoint into one of this package's families"


def add_to(convert):
    kinds = convert.add_subparsers(dest="kind", required=True, metavar="KIND")
    reformer = kinds.add_parser("reformer", help="a transformers Reformer folder (config.json + safetensors) as a "
                                                 "rev-lsh folder: the same weights and outputs", allow_abbrev=False)
    reformer.add_argument("source", metavar="SRC", help="folder written by transformers' Reformer save_pretrained")
    reformer.add_argument("output", metavar="OUT", help="new folder; loads with the Auto classes")
    reformer.set_defaults(handler=run_reformer)


def run_reformer(args):
    from hf_plm_ext.convert.reformer import convert_reformer

    convert_reformer(args.source, args.output)
    print(f"converted {args.source} into a rev-lsh checkpoint in {args.output}")
