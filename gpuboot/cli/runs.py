"""`gpuboot runs list|prune`: the kept run directories and their retention."""

from __future__ import annotations

from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_OK


def register(verbs, common) -> None:
    rn = verbs.add_parser(
        "runs",
        parents=[common],
        help="kept run directories: list, prune",
        epilog="exit codes: 0 done, 2 bad input",
    )
    actions = rn.add_subparsers(dest="runs_action", parser_class=type(rn))
    actions.add_parser("list", parents=[common], help="every kept run, oldest first")
    prune = actions.add_parser(
        "prune",
        parents=[common],
        help="remove old runs (never the newest of a verb, never one in progress)",
    )
    how = prune.add_mutually_exclusive_group(required=True)
    how.add_argument("--keep", type=int, metavar="N", help="keep the N newest runs per verb")
    how.add_argument("--older-than", metavar="AGE", help="remove runs older than AGE: 14d, 12h")
    prune.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    rn.set_defaults(func=run, runs_action="list")


def run(args) -> Outcome:
    from gpuboot import runs
    from gpuboot.cli import render

    if args.runs_action == "prune":
        age = runs.parse_age(args.older_than) if args.older_than else None
        doc = runs.prune(keep=args.keep, older_than=age, dry_run=args.dry_run)
        return Outcome(EXIT_OK, doc, render.prune_text(doc, dry_run=args.dry_run))
    found = runs.list_runs()
    return Outcome(EXIT_OK, {"runs": [r.to_dict() for r in found]}, render.runs_table(found))
