"""`gpuboot help [COMMAND]` and `gpuboot completion bash|zsh`: both read the parser tree
itself (gpuboot.completion), so neither can go stale."""

from __future__ import annotations

from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_OK


def register(verbs, common) -> None:
    hp = verbs.add_parser("help", parents=[common], help="help on gpuboot or one of its commands")
    hp.add_argument("words", nargs="*", metavar="COMMAND", help="e.g. install, or runs prune")
    hp.set_defaults(func=run_help)

    cp = verbs.add_parser(
        "completion", help="shell completion, generated from this parser: source <(...)"
    )
    cp.add_argument("shell", choices=["bash", "zsh"])
    cp.set_defaults(func=run_completion)


def run_help(args) -> Outcome:
    from gpuboot.completion import help_text

    text = help_text(args.root, args.words)
    return Outcome(EXIT_OK, {"help": text}, text)


def run_completion(args) -> Outcome:
    from gpuboot.completion import SHELLS

    return Outcome(EXIT_OK, {}, SHELLS[args.shell](args.root))
