"""Formatting for humans: tables and live per-host progress (pure; cli.py writes)."""

from __future__ import annotations

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


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in headers]] + [[("" if c is None else str(c)) for c in r] for r in rows]
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
