"""`gpuboot plan`: installed against pinned, per node (read-only)."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK


def register(verbs, common) -> None:
    pl = verbs.add_parser(
        "plan",
        parents=[common, options.targets(required=True)],
        help="installed vs pinned, per node (read-only)",
    )
    pl.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot import plan

    doc = plan.plan(args.inventory, limit=args.limit)
    # a node install would refuse (a driver installed outside packages) fails the plan too
    failed = any("error" in n or "outside_packages" in n for n in doc["nodes"])
    return Outcome(EXIT_NODE_FAILED if failed else EXIT_OK, doc, plan.render(doc))
