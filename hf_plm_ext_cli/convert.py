"""``hf-plm-ext convert reformer|adapterhub SRC OUT``: checkpoints of other implementations as this package's families."""

NAME, HELP = "convert", "convert another implementation's checkpoint into one of this package's families"


def add_to(convert):
    kinds = convert.add_subparsers(dest="kind", required=True, metavar="KIND")
    reformer = kinds.add_parser("reformer", help="a transformers Reformer folder (config.json + safetensors) as a "
                                                 "rev-lsh folder: the same weights and outputs", allow_abbrev=False)
    reformer.add_argument("source", metavar="SRC", help="folder written by transformers' Reformer save_pretrained")
    reformer.add_argument("output", metavar="OUT", help="new folder; loads with the Auto classes")
    reformer.set_defaults(handler=run_reformer)
    adapterhub = kinds.add_parser("adapterhub", help="an AdapterHub bottleneck adapter (the folder save_adapter "
                                                     "wrote, safetensors) as a PEFT adapter: the same outputs",
                                  allow_abbrev=False)
    adapterhub.add_argument("source", metavar="DIR", help="adapter_config.json + adapter.safetensors (+ the head's)")
    adapterhub.add_argument("output", metavar="OUT", help="new folder; loads with PeftModel.from_pretrained(base, OUT) "
                                                          "after import hf_plm_ext")
    adapterhub.set_defaults(handler=run_adapterhub)


def run_reformer(args):
    from hf_plm_ext.convert.reformer import convert_reformer

    convert_reformer(args.source, args.output)
    print(f"converted {args.source} into a rev-lsh checkpoint in {args.output}")


def run_adapterhub(args):
    from hf_plm_ext.convert.adapterhub import convert_adapterhub

    convert_adapterhub(args.source, args.output)
    print(f"converted {args.source} into a PEFT bottleneck adapter in {args.output}")
