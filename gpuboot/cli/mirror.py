"""`gpuboot mirror`: the packages an offline mirror needs (with --repo, their closure),
for one stack or the union of an inventory's. stdout holds the list alone (one
NAME=VERSION or NAME-VERSION a line, for a script to read); the summary goes to stderr."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, err
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK, BadInput


def register(verbs, common) -> None:
    mi = verbs.add_parser(
        "mirror",
        parents=[
            common,
            options.os_family(),
            options.targets(
                required=False,
                inventory_help="the union of the stacks the inventory's hosts name "
                "(instead of --stack)",
            ),
        ],
        help="packages an offline mirror needs (with --repo: their dependency closure)",
        epilog="exit codes: 0 listed (closure complete), 1 a dependency the mirror cannot"
        " satisfy, 2 bad input (stack, inventory, --repo unreadable)",
    )
    # -i: the hosts' own family unless given; --stack: debian unless given
    mi.set_defaults(os_family=None)
    mi.add_argument("--stack", help="a stack name or file (or -i INVENTORY)")
    mi.add_argument(
        "--repo",
        action="append",
        metavar="INDEX",
        help="the mirror's apt Packages index or dnf repodata (file, directory or URL; "
        "repeatable): resolve the dependencies from it (default: the pinned packages only)",
    )
    mi.add_argument(
        "--probe-tools",
        action="append",
        metavar="NAME=VERSION",
        help="the site's probe-tools package (gpuboot_probe_tools_packages), repeatable",
    )
    mi.add_argument("--arch", help="architecture to resolve for (default amd64; x86_64 on redhat)")
    mi.set_defaults(func=run)


def run(args) -> Outcome:
    from gpuboot import matrix

    if bool(args.stack) == bool(args.inventory):
        raise BadInput(
            "give either --stack or -i INVENTORY",
            where="gpuboot mirror",
            hint="e.g. gpuboot mirror --stack lts-550-cuda12.4, or gpuboot mirror -i site.yml",
        )
    if args.limit and not args.inventory:
        raise BadInput("--limit selects inventory hosts", where="--limit", hint="add -i INVENTORY")
    summary: list[str] = []
    if args.inventory:
        doc, summary = _inventory(args)
        family = doc["os_family"]
    else:
        family = args.os_family or "debian"
        doc = matrix.mirror(args.stack, family, args.repo or (), args.probe_tools or (), args.arch)
    sep = "=" if family == "debian" else "-"
    text = "\n".join(f"{p['name']}{sep}{p['version']}" for p in doc["packages"])
    if doc["scope"] == "top-level":
        summary.append("top-level packages only, not their dependencies: give --repo")
    else:
        pinned = sum(p["pinned"] for p in doc["packages"])
        summary.append(
            f"closure: {len(doc['packages'])} package(s), {pinned} pinned and "
            f"{len(doc['packages']) - pinned} dependencies, from {', '.join(doc['repositories'])}"
        )
    if not args.quiet:
        for line in summary:
            err(f"gpuboot: {line}")
    for u in doc.get("unsatisfied", ()):  # what makes the exit 1: said even with -q
        err(f"UNSATISFIED {u['package']} {u['version']} needs {u['needs']}: {u['reason']}")
    return Outcome(EXIT_NODE_FAILED if doc.get("unsatisfied") else EXIT_OK, doc, text)


def _inventory(args) -> tuple[dict, list[str]]:
    """The union of the selected hosts' stacks: (the document, the summary's lines)."""
    from gpuboot import matrix, mirror
    from gpuboot.inventory import load_inventory, select_hosts

    inv = load_inventory(args.inventory)
    hosts = select_hosts(inv, args.limit)
    family, stacks, alone = mirror.inventory_stacks(inv.hosts, hosts, args.os_family)
    summary = [f"{name}: {', '.join(on)}" for name, on in stacks.items()]
    if alone:
        summary.append(
            f"not listed: {', '.join(alone)} pin the driver alone (nvidia_driver_version), "
            "no stack: give them a gpuboot_stack"
        )
    if not stacks:
        raise BadInput(
            f"no selected host names a gpuboot_stack ({', '.join(alone)} pin the driver alone)",
            where=str(inv.path),
            hint="give the hosts a gpuboot_stack, or list one stack: gpuboot mirror --stack NAME",
        )
    docs = [
        matrix.mirror(name, family, args.repo or (), args.probe_tools or (), args.arch)
        for name in stacks
    ]
    doc = {
        **mirror.union(docs),
        "inventory": str(inv.path),
        "hosts": {name: on for name, on in stacks.items()},
        "driver_only": alone,
    }
    return doc, summary
