"""``hf-plm-ext correct MODEL TEXT... | --file F``: Chinese spelling correction with a MacBERT4CSC model."""

NAME, HELP = "correct", "correct Chinese spelling with a spelling-correction model (hf-plm-ext finetune csc)"


def add_to(parser):
    parser.add_argument("model", metavar="MODEL", help="a spelling-correction checkpoint folder")
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to correct, right after MODEL "
                        "(argparse's rule: options come after them)")
    parser.add_argument("--file", metavar="FILE", help="also every line of this UTF-8 file")
    parser.add_argument("--json", action="store_true", help="one JSON object per input: source, target, errors "
                                                            "([position, wrong, right] each)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.set_defaults(handler=run)


def run(args):
    import json
    from pathlib import Path

    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.csc.corrector import SpellingCorrector

    texts = list(args.texts)
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise UserInputError(f"--file {path} not found")
        texts += path.read_text(encoding="utf-8").splitlines()
    if not texts:
        raise UserInputError("nothing to correct: give sentences, or --file")
    corrector = SpellingCorrector.from_pretrained(args.model, batch_size=args.batch_size)
    for result in corrector(texts, progress=bool(args.file)):
        if args.json:
            print(json.dumps(result, ensure_ascii=False))
        else:
            errors = ", ".join(f"({i}, {wrong}, {right})" for i, wrong, right in result["errors"])
            print(result["target"] + (f"\t{errors}" if errors else ""))
