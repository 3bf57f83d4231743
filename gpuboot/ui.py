"""Formatting for humans: tables and live per-host progress (pure; gpuboot.cli prints)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# install's host statuses as its table shows them (a failure in capitals)
STATUS_MARK = {
    "ok": "ok",
    "changed": "changed",
    "failed": "FAILED",
    "unreachable": "UNREACHABLE",
    "unknown": "UNKNOWN",
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


def host_ranges(hosts) -> str:
    """Host names folded into ranges, in natural order: node1..node4, node7 and gpu-a3 read
    ``node[1-4,7], gpu-a3`` (the hostlist notation of cluster tools). Zero-padded numbers
    keep their width (gpu01..gpu03 read ``gpu[01-03]``; gpu10 joins them), and never share
    a range with unpadded ones or another width: gpu1 and gpu01 are two hosts."""
    from gpuboot.report._util import host_key  # the one natural order (node2 < node10)

    # (prefix, width): width 0 unpadded, -1 a name without a number
    groups: dict[tuple[str, int], list[int]] = {}
    for host in hosts:
        found = _NUMBERED.fullmatch(str(host))
        if not found:
            groups.setdefault((str(host), -1), [])
            continue
        digits = found[2]
        width = len(digits) if len(digits) > 1 and digits.startswith("0") else 0
        groups.setdefault((found[1], width), []).append(int(digits))
    for (prefix, width), numbers in list(groups.items()):
        if width != 0:
            continue
        stay: list[int] = []
        for n in numbers:  # gpu10 beside gpu01..gpu09 is as wide as they are: one of them
            groups.get((prefix, len(str(n))), stay).append(n)
        if stay:
            groups[(prefix, 0)] = stay
        else:
            del groups[(prefix, 0)]
    parts = []
    for (prefix, width), numbers in groups.items():
        if width < 0:
            parts.append((prefix, prefix))
            continue
        numbers = sorted(set(numbers))
        spec = f"0{width}d"  # width 0: as the number is
        runs, start = [], numbers[0]
        for prev, cur in zip(numbers, [*numbers[1:], None], strict=True):
            if cur is None or cur != prev + 1:  # a run ends at prev
                runs.append(f"{start:{spec}}" if start == prev else f"{start:{spec}}-{prev:{spec}}")
                start = cur
        first = f"{prefix}{numbers[0]:{spec}}"
        text = first if len(numbers) == 1 else f"{prefix}[{','.join(runs)}]"
        parts.append((first, text))
    # gpu01 before gpu1 where the natural order ties
    return ", ".join(text for _, text in sorted(parts, key=lambda p: (host_key(p[0]), p[0])))


_NUMBERED = re.compile(r"(.*?)(\d+)")
# hosts listed one row each, with their reason: all but those that converged
LISTED = ("failed", "unreachable", "pending", "unknown")


def host_table(hosts: dict, draw: Callable[..., str] | None = None) -> str:
    """install's final table: every host that failed, was unreachable, was never reached or
    whose outcome is unknown (its executor was lost) first, one row each with its task and
    reason; then hosts with identical results folded into one row ("8 hosts ... changed 31").
    ``draw(headers, rows)`` lays it out (the CLI fits it to the terminal); ``table`` by default."""
    from gpuboot.report._util import host_key

    names = sorted(hosts, key=host_key)
    rows: list[tuple[object, ...]] = []
    for h in names:
        r = hosts[h]
        if r.status in LISTED:
            rows.append(
                (
                    h,
                    1,
                    STATUS_MARK.get(r.status, r.status),
                    r.ok,
                    r.changed,
                    r.failed,
                    r.failed_task or "",
                    r.reason or "",
                )
            )
    same: dict[tuple, list[str]] = {}
    for h in names:
        r = hosts[h]
        if r.status not in LISTED:
            same.setdefault((r.status, r.ok, r.changed, r.failed), []).append(h)
    for (status, ok, changed, failed), group in same.items():
        rows.append((host_ranges(group), len(group), status, ok, changed, failed, "", ""))
    counts = {s: sum(1 for r in hosts.values() if r.status == s) for s in ("ok", "changed")}
    counts.update({s: sum(1 for r in hosts.values() if r.status == s) for s in LISTED})
    summary = f"{len(hosts)} hosts: " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n or s in ("ok", "changed")
    )
    headers = ("hosts", "n", "status", "ok", "changed", "failed", "failed task", "reason")
    return (draw or table)(headers, rows) + "\n" + summary
