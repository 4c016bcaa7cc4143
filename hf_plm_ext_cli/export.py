"""``hf-plm-ext export electra``: one half of an ELECTRA run as a stock ``electra`` checkpoint."""

NAME, HELP = "export", "export a model as a checkpoint that stock transformers loads"


def add_to(export):
    kinds = export.add_subparsers(dest="kind", required=True, metavar="KIND")
    electra = kinds.add_parser("electra", help="the discriminator (for fine-tuning) or the generator of a "
                                               "`pretrain electra` run, as model_type 'electra'", allow_abbrev=False)
    electra.add_argument("--part", choices=("discriminator", "generator"), default="discriminator",
                         help="which half (default: discriminator)")
    electra.add_argument("run_dir", metavar="RUN_DIR", help="output folder of `hf-plm-ext pretrain electra`")
    electra.add_argument("out_dir", metavar="OUT_DIR", help="new folder")
    electra.set_defaults(handler=run_electra)


def run_electra(args):
    from hf_plm_ext.convert.electra import export_electra

    export_electra(args.run_dir, args.out_dir, args.part)
    print(f"saved the {args.part} as a stock `electra` checkpoint to {args.out_dir}")
