"""What every verb shares: the Outcome it hands back and the stderr lines it may write."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

# certify (with --sign-key) and cert verify: no node failed, but a node's certificate is
# partial with a gap its gpuboot_accept_partial does not accept: it is not certified.
# Not 1 (nothing failed), nor 4-6 (scan's): documented in README.md's exit codes.
EXIT_PARTIAL = 7
# install: no host failed, but some hosts' outcome is unknown because the executor running
# them was lost (a cut stream, ssh's 255, silence past the heartbeat): neither ok nor
# failed, so neither 0 nor 1. Outranked by 2/3, and by 1 when a host truly failed.
EXIT_UNKNOWN = 8


class Outcome:
    """What a verb hands back: an exit code, a JSON document and the human text."""

    def __init__(self, code: int, doc: dict[str, Any], text: str = ""):
        self.code, self.doc, self.text = code, doc, text


def err(msg: str) -> None:
    from gpuboot.ui import printable

    sys.stderr.write(printable(msg) + "\n")
    sys.stderr.flush()


def progress(args) -> Callable[[str], None]:
    """Progress and warnings on stderr, silenced by -q."""
    if getattr(args, "quiet", False):
        return lambda _msg: None
    return lambda msg: err(f"gpuboot: {msg}")


def deprecated(old: str, new: str) -> None:
    """One line on stderr, -q or not: the old spelling still works, once more."""
    err(f"gpuboot: `{old}` is deprecated: use `{new}`")
