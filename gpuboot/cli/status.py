"""`gpuboot status`: per node, from the controller's runs and scan history (no SSH); with a
node and --history, that node's timeline."""

from __future__ import annotations

import shlex
from pathlib import Path

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, progress
from gpuboot.errors import EXIT_OK

# `--history` alone asks for the node's timeline; with a value it names the scan history
# (as every other verb's --history FILE does), and asks for the timeline too when a node
# is given.
TIMELINE = "timeline"


def register(verbs, common) -> None:
    stv = verbs.add_parser(
        "status",
        parents=[
            common,
            options.targets(
                required=False,
                inventory_help="only this inventory's nodes",
                limit_help="Ansible host pattern (with -i)",
            ),
        ],
        help="per node: last certify, certificate expiry, stack, last scan, drift (no SSH); "
        "with NODE --history: that node's timeline",
    )
    stv.add_argument(
        "node",
        nargs="?",
        help="one node: its row; with --history its timeline (installs, certifications, "
        "scans, reboots, faults, escalations, releases, remediation), oldest first",
    )
    stv.add_argument(
        "--history",
        nargs="?",
        const=TIMELINE,
        metavar="FILE",
        help="with NODE (named first: status NODE --history): show its timeline. FILE, "
        f"which must exist (a value here is never a node): the {options.HISTORY_HELP}",
    )
    stv.set_defaults(func=run)


def scan_history(value: str | None, node: str | None) -> Path | None:
    """The scan history FILE --history names (None: the default one). The value after
    --history is always a file, as on every other verb, and must be one: read as an empty
    history, a node's name (`status --history node1`) showed nothing and exited 0."""
    if value in (None, TIMELINE):
        return None
    path = Path(value)
    if path.is_file():
        return path
    from gpuboot.errors import BadInput

    state = "is a directory" if path.is_dir() else "does not exist"
    name = shlex.quote(node or value)
    raise BadInput(
        f"no scan history file {value!r} ({path.absolute()} {state}): the value after "
        "--history is a scan history FILE, never a node",
        where="gpuboot status --history",
        hint=f"gpuboot status {name} --history (node {node or value}'s timeline: the node "
        "first, --history last), or gpuboot status --history PATH with an existing scan "
        "history file",
    )


def run(args) -> Outcome:
    from gpuboot import status
    from gpuboot.cli import render

    history = scan_history(args.history, args.node)
    if args.node and args.history:
        from gpuboot import timeline

        doc = timeline.node_timeline(args.node, history=history, warn=progress(args))
        return Outcome(EXIT_OK, doc, render.table_text(args, timeline.HEADERS, timeline.rows(doc)))
    if args.history == TIMELINE:
        from gpuboot.errors import BadInput

        raise BadInput(
            "--history without a FILE shows one node's timeline: name the node",
            where="gpuboot status --history",
            hint="gpuboot status node1 --history (or --history FILE for another scan history)",
        )
    hosts = [args.node] if args.node else None
    if args.inventory:
        from gpuboot.inventory import load_inventory, select_hosts

        hosts = select_hosts(load_inventory(args.inventory), args.limit)
        hosts = [h for h in hosts if h == args.node] if args.node else hosts
    doc = status.fleet_status(hosts, history=history, warn=progress(args))
    return Outcome(EXIT_OK, doc, render.table_text(args, status.HEADERS, status.rows(doc)))
