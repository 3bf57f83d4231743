"""`gpuboot status`: per node, from the controller's runs and scan history (no SSH)."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, progress
from gpuboot.errors import EXIT_OK


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
            options.history(),
        ],
        help="per node: last certify, certificate expiry, stack, last scan, drift (no SSH)",
    )
    stv.set_defaults(func=run)


def run(args) -> Outcome:
    from pathlib import Path

    from gpuboot import status
    from gpuboot.ui import table

    hosts = None
    if args.inventory:
        from gpuboot.inventory import load_inventory, select_hosts

        hosts = select_hosts(load_inventory(args.inventory), args.limit)
    doc = status.fleet_status(
        hosts, history=Path(args.history) if args.history else None, warn=progress(args)
    )
    return Outcome(EXIT_OK, doc, table(status.HEADERS, status.rows(doc)))
