"""`gpuboot plan`: installed against pinned, per node (read-only)."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import EXIT_UNKNOWN, Outcome
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
    return Outcome(exit_code(doc["nodes"]), doc, plan.render(doc))


def exit_code(nodes: list[dict]) -> int:
    """1: a node was not read on its own account, or install would refuse it (a driver
    installed outside packages); else 8: a node's executor was lost, its plan is unknown
    (never counted as the node's fault); else 0."""
    if any(("error" in n and not n.get("unknown")) or "outside_packages" in n for n in nodes):
        return EXIT_NODE_FAILED
    return EXIT_UNKNOWN if any(n.get("unknown") for n in nodes) else EXIT_OK
