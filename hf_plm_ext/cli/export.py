"""``hf-plm-ext export electra``: one half of an ELECTRA run as a stock ``electra`` checkpoint."""

from hf_plm_ext.convert.electra import export_electra


def add_to(commands):
    export = commands.add_parser("export", help="export a model as a checkpoint that stock transformers loads")
    kinds = export.add_subparsers(dest="kind", required=True, metavar="KIND")
    electra = kinds.add_parser("electra", help="the discriminator (for fine-tuning) or the generator of a "
                                               "`pretrain electra` run, as model_type 'electra'", allow_abbrev=False)
    electra.add_argument("--part", choices=("discriminator", "generator"), default="discriminator")
    electra.add_argument("run_dir", metavar="RUN_DIR", help="output folder of `hf-plm-ext pretrain electra`")
    electra.add_argument("out_dir", metavar="OUT_DIR", help="new folder")
    electra.set_defaults(handler=run_electra)


def run_electra(args):
    export_electra(args.run_dir, args.out_dir, args.part)
    print(f"saved the {args.part} as a stock `electra` checkpoint to {args.out_dir}")
