"""`gpuboot mirror`: the packages an offline mirror needs (with --repo, their closure)."""

from __future__ import annotations

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, err
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK


def register(verbs, common) -> None:
    mi = verbs.add_parser(
        "mirror",
        parents=[common, options.os_family()],
        help="packages an offline mirror needs (with --repo: their dependency closure)",
        epilog="exit codes: 0 listed (closure complete), 1 a dependency the mirror cannot"
        " satisfy, 2 bad input (stack, --repo unreadable)",
    )
    mi.add_argument("--stack", required=True)
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

    doc = matrix.mirror(
        args.stack, args.os_family, args.repo or (), args.probe_tools or (), args.arch
    )
    sep = "=" if args.os_family == "debian" else "-"
    text = "\n".join(f"{p['name']}{sep}{p['version']}" for p in doc["packages"])
    if doc["scope"] == "top-level":
        if not args.quiet:  # stderr: stdout stays one NAME=VERSION per line
            err("gpuboot: top-level packages only, not their dependencies: give --repo")
        return Outcome(EXIT_OK, doc, text)
    pinned = sum(p["pinned"] for p in doc["packages"])
    text += (
        f"\nclosure: {len(doc['packages'])} package(s), {pinned} pinned and "
        f"{len(doc['packages']) - pinned} dependencies, from {', '.join(doc['repositories'])}"
    )
    for u in doc["unsatisfied"]:
        text += f"\nUNSATISFIED {u['package']} {u['version']} needs {u['needs']}: {u['reason']}"
    return Outcome(EXIT_NODE_FAILED if doc["unsatisfied"] else EXIT_OK, doc, text)
