"""``hf-plm-ext k-adapter new|combine``: K-Adapter checkpoints to train with ``finetune`` (``hf_plm_ext.adapters.k_adapter``)."""

NAME, HELP = "k-adapter", "make a K-Adapter on a frozen backbone, or combine separately trained ones"


def add_to(k_adapter):
    actions = k_adapter.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = actions.add_parser("new", help="fresh knowledge adapters beside a backbone (any transformers encoder); "
                                         "train them with `finetune ... --model OUT`", allow_abbrev=False)
    new.add_argument("--backbone", required=True, help="folder or Hub id of the backbone (frozen)")
    new.add_argument("--adapters", nargs="+", default=["adapter"], metavar="NAME", help="adapter names")
    new.add_argument("--adapter-layers", type=int, nargs="+", metavar="I",
                     help="backbone hidden-state indices the adapters read (default: three spread over the depth)")
    new.add_argument("--adapter-size", type=int, help="the adapters' width (default: 3/4 of the backbone's, the "
                                                      "paper's 768 on RoBERTa-large's 1024)")
    new.add_argument("--adapter-num-layers", type=int, default=2, help="transformer layers per adapter block "
                                                                       "(default: 2)")
    new.add_argument("--adapter-num-attention-heads", type=int, help="default: heads of 64 (the paper's 12 of 768)")
    new.add_argument("--adapter-intermediate-size", type=int, help="default: 4x --adapter-size (the paper's 3072)")
    new.add_argument("--fusion", choices=["concat", "add"], default="concat")
    new.add_argument("--embed-backbone", action="store_true",
                     help="save the backbone's weights too (default: refer to --backbone)")
    new.add_argument("--output", required=True, help="new folder")
    new.set_defaults(handler=run_new)
    combine = actions.add_parser("combine", help="the adapters of several K-Adapter checkpoints (same backbone) in "
                                                 "one model with a new fusion", allow_abbrev=False)
    combine.add_argument("sources", nargs="+", metavar="DIR", help="K-Adapter checkpoints (e.g. finetune outputs)")
    combine.add_argument("--freeze-adapters", action="store_true",
                         help="keep the adapters frozen when the combination is fine-tuned (the paper's "
                              "--freeze_adapter)")
    combine.add_argument("--fusion", choices=["concat", "add"], help="default: the first checkpoint's")
    combine.add_argument("--output", required=True, help="new folder")
    combine.set_defaults(handler=run_combine)


def run_new(args):
    from hf_plm_ext.adapters.k_adapter import new_k_adapter

    fields = dict(adapter_size=args.adapter_size, adapter_num_layers=args.adapter_num_layers,
                  adapter_num_attention_heads=args.adapter_num_attention_heads,
                  adapter_intermediate_size=args.adapter_intermediate_size, fusion=args.fusion,
                  adapter_layers=args.adapter_layers)
    fields = {name: value for name, value in fields.items() if value is not None}  # left out: the config's rule
    new_k_adapter(args.backbone, args.output, args.adapters, args.embed_backbone, **fields)
    print(f"K-Adapter with adapters {', '.join(args.adapters)} on {args.backbone} in {args.output}")


def run_combine(args):
    from hf_plm_ext.adapters.k_adapter import combine_k_adapters

    combine_k_adapters(args.sources, args.output, args.freeze_adapters, args.fusion)
    print(f"combined the adapters of {', '.join(args.sources)} in {args.output}")
