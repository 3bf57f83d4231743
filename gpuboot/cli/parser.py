"""The argument tree: gpuboot's verbs, each declared by its own module, and the verbs of
other distributions (the lab) found through the ``gpuboot.verbs`` entry points."""

from __future__ import annotations

import argparse
import sys
from typing import ClassVar

from gpuboot import __version__
from gpuboot.cli import (
    breaker,
    cert,
    certify,
    evaluate,
    executor,
    help,
    install,
    matrix,
    mirror,
    node,
    options,
    plan,
    remediate,
    report,
    runs,
    scan,
    schedule,
    status,
)
from gpuboot.cli.outcome import Outcome
from gpuboot.errors import BadInput

# In the order `gpuboot --help` lists them.
VERBS = (
    install,
    certify,
    cert,
    scan,
    schedule,
    breaker,
    remediate,
    matrix,
    plan,
    mirror,
    runs,
    help,
    evaluate,
    status,
    node,
    report,
    executor,
)
LAB_MISSING = "the lab is not installed: pip install 'gpuboot[lab]'"


class Parser(argparse.ArgumentParser):
    """argparse that reports usage errors through our boundary (exit 2, one line)."""

    argv: ClassVar[list[str]] = []  # what the top parser was given: "did you mean" reads it

    def error(self, message: str):  # type: ignore[override]
        from gpuboot.completion import did_you_mean

        see = f"see `{self.prog} --help`"
        guess = did_you_mean(self, message, Parser.argv)
        raise BadInput(message, where=self.prog, hint=f"{guess} {see}" if guess else see)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        from gpuboot.completion import chosen

        Parser.argv = list(sys.argv[1:] if args is None else args)
        ns, extras = self.parse_known_args(Parser.argv, namespace)
        if extras:  # told by the verb's parser: its options are the ones to suggest
            chosen(self, ns).error(f"unrecognized arguments: {' '.join(extras)}")
        return ns


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="gpuboot",
        description="Bootstrap, pin and certify GPU servers.",
        epilog="exit codes: 0 all good, 1 a node failed, 2 bad input, 3 the run broke",
    )
    p.add_argument("--version", action="version", version=f"gpuboot {__version__}")
    verbs = p.add_subparsers(dest="verb", required=True, parser_class=Parser)
    p.set_defaults(root=p)  # help and completion read the tree they belong to
    common = options.output()
    _add_plugin_verbs(verbs, common)
    for verb in VERBS:
        verb.register(verbs, common)
    options.add_text_format(verbs)
    return p


def _add_plugin_verbs(verbs, common: argparse.ArgumentParser) -> None:
    """Verbs that live outside the product (the lab's `gpuboot lab ...`), found through
    the entry point group ``gpuboot.verbs``: the product never imports the lab."""
    from importlib.metadata import entry_points

    added = set()
    for ep in entry_points(group="gpuboot.verbs"):
        try:
            register = ep.load()
        except ImportError:  # declared by an install whose code is gone: as if absent
            continue
        register(verbs, common)
        added.add(ep.name)
    if "lab" not in added:
        stub = verbs.add_parser("lab", help="a simulated GPU fleet (not installed)")
        stub.add_argument("rest", nargs=argparse.REMAINDER)
        stub.set_defaults(func=_lab_missing)


def _lab_missing(_args) -> Outcome:
    raise BadInput(LAB_MISSING, hint="the lab also needs podman and debootstrap (make setup)")
