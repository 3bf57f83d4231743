"""`gpuboot matrix list|show|check|import`: the version stacks, their compatibility rules,
and the site stacks a running fleet's packages make."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import EXIT_UNKNOWN, Outcome
from gpuboot.errors import EXIT_BAD_INPUT, EXIT_NODE_FAILED, EXIT_OK, BadInput


def register(verbs, common) -> None:
    mx = verbs.add_parser(
        "matrix",
        parents=[
            common,
            options.os_family(),
            options.targets(
                required=False, inventory_help="import: the inventory whose nodes to read"
            ),
        ],
        help="version stacks and their rules; import a running fleet's as site stacks",
    )
    mx.add_argument("action", choices=["list", "show", "check", "import"])
    mx.add_argument("stack", nargs="?", help="stack name or stack file")
    mx.add_argument("--profile", action="append", help="check against this SKU (repeatable)")
    mx.add_argument(
        "--out", help="import: a new or empty directory for the stacks it writes (required)"
    )
    mx.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot import matrix
    from gpuboot.cli import render

    if args.action == "import":
        return _import(args)
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


def _import(args) -> Outcome:
    """Exit 0: every selected node's software is in a written stack; 1: a node was refused,
    not read, or its stack failed matrix check (the others are written); 2: bad input; 8:
    none of these but a node's executor was lost (not read, unknown, not the node's fault)."""
    from gpuboot import matrix_import

    if not args.inventory or not args.out:
        raise BadInput(
            "`gpuboot matrix import` needs -i INVENTORY and --out DIR",
            hint="gpuboot matrix import -i inventory/site.yml --out stacks/site",
        )
    doc = matrix_import.import_stacks(args.inventory, args.out, limit=args.limit)
    unread = [u for u in doc["unread"] if not u.get("unknown")]
    failed = doc["refused"] or unread or doc["not_checked"]
    code = EXIT_UNKNOWN if doc["unread"] and not failed else EXIT_OK
    return Outcome(EXIT_NODE_FAILED if failed else code, doc, matrix_import.render(doc))
