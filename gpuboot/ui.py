"""Formatting for humans: tables and live per-host progress (pure; cli.py writes)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence

STATUS_MARK = {
    "ok": "ok",
    "changed": "changed",
    "failed": "FAILED",
    "unreachable": "UNREACHABLE",
    "PASS": "PASS",
    "WARN": "WARN",
    "FAIL": "FAIL",
    "ERROR": "ERROR",
}


# C0 and C1 control characters but line feed and tab: what a node's answer (a probe's
# stderr, a bundle's host name) could use to rewrite the operator's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_CELL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with control characters written as escapes (``\\x1b``, and ``\\n`` too
    when ``one_line``): nothing gpuboot prints can move the cursor or recolour a terminal."""
    return (_CONTROL_CELL if one_line else _CONTROL).sub(_escape, text)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers]] + [
        [("" if c is None else printable(str(c), one_line=True)) for c in r] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


class LiveHosts:
    """Per-host status lines: redrawn in place on a terminal, appended otherwise."""

    def __init__(self, write, is_tty: bool):
        self.write = write
        self.is_tty = is_tty
        self.drawn = 0
        self.last: dict[str, tuple[str, str]] = {}

    def _line(self, r) -> str:
        counts = f"ok={r.ok} changed={r.changed} failed={r.failed}"
        state = STATUS_MARK.get(r.status, r.status)
        return f"{r.host:<14} {state:<11} {counts:<28} {r.reason or r.task}"

    def update(self, hosts: dict) -> None:
        if self.is_tty:
            width = shutil.get_terminal_size((120, 20)).columns
            lines = [clip(self._line(r), width - 1) for _, r in sorted(hosts.items())]
            up = f"\x1b[{self.drawn}F" if self.drawn else ""
            self.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
            self.drawn = len(lines)
            return
        for name, r in sorted(hosts.items()):
            key = (r.status, r.task if r.status in ("ok", "changed") else (r.reason or ""))
            if self.last.get(name) != key:
                self.last[name] = key
                self.write(self._line(r) + "\n")
