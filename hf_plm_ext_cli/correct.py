"""``hf-plm-ext correct MODEL TEXT... | --file F``: Chinese spelling correction with a MacBERT4CSC model."""

import sys

from hf_plm_ext_cli.arguments import positive_int

NAME, HELP = "correct", "correct Chinese spelling with a spelling-correction model (hf-plm-ext finetune csc)"


def stdin_is_piped() -> bool:
    """Standard input is a pipe or a redirected file (not a terminal, not /dev/null)."""
    import io
    import os
    import stat

    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, io.UnsupportedOperation):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def add_to(parser):
    parser.add_argument("model", metavar="MODEL", help="a spelling-correction checkpoint folder")
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="sentences to correct (options may come before, "
                        "between or after them; after --, a text may start with a dash)")
    parser.add_argument("--file", metavar="FILE", help="also every line of this UTF-8 file; '-': standard input "
                        "(read too when it is piped and no TEXT is given)")
    parser.add_argument("--json", action="store_true", help="one JSON object per input: source, target, errors "
                                                            "([position, wrong, right] each)")
    parser.add_argument("--batch-size", type=positive_int, default=32)
    parser.set_defaults(handler=run)


def run(args):
    import json
    from pathlib import Path

    from hf_plm_ext.csc.corrector import SpellingCorrector
    from hf_plm_ext.errors import UserInputError
    from hf_plm_ext.files import decode_utf8, read_utf8

    texts = list(args.texts)
    if args.file == "-" or (args.file is None and not texts and stdin_is_piped()):
        texts += decode_utf8(sys.stdin.buffer.read(), "standard input").splitlines()
    elif args.file:
        path = Path(args.file)
        if not path.exists() or path.is_dir():  # (a pipe, /dev/stdin, is not a regular file but reads)
            raise UserInputError(f"--file {path} not found")
        texts += read_utf8(path).splitlines()
        if not any(text.strip() for text in texts):
            raise UserInputError(f"--file {path} has no lines to correct")
    if not texts:
        raise UserInputError("nothing to correct: give sentences, --file FILE, or text on standard input "
                             "(--file -, or piped)")
    corrector = SpellingCorrector.from_pretrained(args.model, batch_size=args.batch_size)
    for result in corrector(texts, progress=bool(args.file)):
        if args.json:
            print(json.dumps(result, ensure_ascii=False))
        else:
            errors = ", ".join(f"({i}, {wrong}, {right})" for i, wrong, right in result["errors"])
            print(result["target"] + (f"\t{errors}" if errors else ""))
