"""Host names as an operator reads them: natural order (node2 before node10) and a set
of hosts written compactly (node[1-12,14], gpu[01-08])."""

from __future__ import annotations

import re
from collections.abc import Iterable

_PARTS = re.compile(r"(\d+)")
_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


def natural_key(name: str) -> tuple:
    """Sort key: digit runs compare as numbers ("node2" < "node10")."""
    return tuple(
        (1, int(part), part) if part.isdigit() else (0, 0, part)
        for part in _PARTS.split(str(name))
        if part
    )


def natural(names: Iterable[str]) -> list[str]:
    return sorted((str(n) for n in names), key=natural_key)


def _ranges(numbers: list[int], width: int) -> str:
    spans: list[list[int]] = []
    for number in sorted(set(numbers)):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    fmt = f"{{:0{width}d}}"
    return ",".join(
        fmt.format(a) if a == b else f"{fmt.format(a)}-{fmt.format(b)}" for a, b in spans
    )


def compact(names: Iterable[str]) -> str:
    """``node1, node2, node3, node5, login`` -> ``login, node[1-3,5]``: names that differ
    only in a number share one bracket (zero padding kept apart: gpu01 is not gpu1)."""
    numbered = []
    single: list[str] = []
    for name in natural(names):
        match = _NUMBERED.match(name)
        if match:
            numbered.append(match.groups())
        else:
            single.append(name)
    # the padded widths in use: gpu01..gpu10 are one family of width 2
    padded = {(p, s, len(d)) for p, d, s in numbered if len(d) > 1 and d.startswith("0")}
    families: dict[tuple[str, str, int], list[int]] = {}
    for prefix, digits, suffix in numbered:
        width = len(digits) if (prefix, suffix, len(digits)) in padded else 0
        families.setdefault((prefix, suffix, width), []).append(int(digits))
    parts = list(single)
    for (prefix, suffix, width), numbers in families.items():
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}{suffix}")
        else:
            parts.append(f"{prefix}[{_ranges(numbers, width)}]{suffix}")
    return ", ".join(natural(parts))
