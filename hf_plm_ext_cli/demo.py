"""``hf-plm-ext demo``: the whole pipeline on data shipped with the package, in a few CPU minutes
(``hf_plm_ext.demo``)."""

NAME, HELP = "demo", "run the whole pipeline on the embedded sample data"


def add_to(demo):
    demo.add_argument("--output", metavar="DIR", help="new directory (default: runs/demo-<time>)")
    demo.add_argument("--objective", default="mlm", help="an objective of `hf-plm-ext pretrain`; a language "
                                                         "model's demo skips SST-2; csc: Chinese spelling "
                                                         "correction (default: mlm)")
    demo.add_argument("--pretrain-steps", type=int, default=400, help="pre-training steps (default: 400)")
    demo.add_argument("--finetune-epochs", type=float, default=4.0, help="SST-2 epochs (csc: epochs over the "
                                                                                    "misspelt pairs) (default: 4)")
    demo.add_argument("--seed", type=int, default=42, help="random seed (default: 42)")
    demo.add_argument("--adapter", choices=["pfeiffer", "houlsby", "parallel", "lora"],
                      help="fine-tune only this adapter and the head on SST-2 (default: the whole model)")
    demo.set_defaults(handler=run)


def run(args):
    from hf_plm_ext.demo import DemoArguments, run_demo
    from hf_plm_ext_cli.arguments import has_accelerator, retain_freed_memory_as_asked

    retain_freed_memory_as_asked("auto", not has_accelerator())

    run_demo(DemoArguments(args.output, args.objective, args.pretrain_steps, args.finetune_epochs, args.seed,
                           args.adapter))
