"""`gpuboot matrix list|show|check`: the version stacks and their compatibility rules."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_BAD_INPUT, EXIT_OK, BadInput


def register(verbs, common) -> None:
    mx = verbs.add_parser(
        "matrix", parents=[common, options.os_family()], help="version stacks and their rules"
    )
    mx.add_argument("action", choices=["list", "show", "check"])
    mx.add_argument("stack", nargs="?", help="stack name or stack file")
    mx.add_argument("--profile", action="append", help="check against this SKU (repeatable)")
    mx.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot import matrix
    from gpuboot.cli import render

    if args.action == "list":
        rows = matrix.list_all()
        return Outcome(EXIT_OK, {"stacks": rows}, render.stacks_table(rows))
    if not args.stack:
        raise BadInput(
            f"`gpuboot matrix {args.action}` needs a stack name or file",
            hint="`gpuboot matrix list` shows the shipped stacks",
        )
    if args.action == "show":
        doc = matrix.show(args.stack, args.os_family)
        return Outcome(EXIT_OK, doc, render.stack_text(doc))
    doc = matrix.check(args.stack, args.profile)
    code = EXIT_BAD_INPUT if doc["violations"] else EXIT_OK
    return Outcome(code, doc, render.violations_text(doc))
