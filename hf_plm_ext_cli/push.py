"""``hf-plm-ext push DIR --repo-id ID``: a checkpoint folder to a Hub repository, with code and card."""

NAME, HELP = "push", "push a checkpoint folder (weights, code, tokenizer, card, results) to a Hub repository"


def add_to(push):
    push.add_argument("directory", metavar="DIR", help="a folder written by hf-plm-ext (or any save_pretrained); "
                                                       "a PEFT adapter folder is pushed adapter-only")
    push.add_argument("--repo-id", required=True, help="namespace/name; created if it does not exist")
    push.add_argument("--private", action="store_true", help="create the repository private")
    push.add_argument("--revision", help="branch to commit to (created from main if missing)")
    push.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    push.add_argument("--language", nargs="+", help="card metadata, e.g. en zh")
    push.add_argument("--license", help="card metadata, e.g. apache-2.0")
    push.add_argument("--base-model", help="card metadata: the model this one was trained from; for an adapter, "
                                           "the Hub repository of its base model (written into the pushed "
                                           "adapter_config.json in place of a local path)")
    push.add_argument("--dataset", dest="datasets", nargs="+", help="card metadata: training datasets")
    push.set_defaults(handler=run)


def run(args):
    from hf_plm_ext.hub.push import push_checkpoint

    commit = push_checkpoint(args.directory, args.repo_id, private=args.private, revision=args.revision,
                             create_pr=args.create_pr, language=args.language, license=args.license,
                             base_model=args.base_model, datasets=args.datasets)
    print(f"pushed {args.directory} to {args.repo_id}: {commit.pr_url or commit.commit_url}")
