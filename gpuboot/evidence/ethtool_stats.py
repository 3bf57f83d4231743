"""``ethtool -S IFACE``: the driver's counters, one ``name: value`` line each.

mlx5 prints its port counters (``rx_pause_ctrl_phy``, ``rx_prio3_pause``...) and vport ones
(``rx_out_of_buffer``); other drivers prefix per-queue lines (``[0]: rx_bytes: N``, kept
whole as the name). A ``grep`` of the output (no ``NIC statistics:`` header) reads the same.
Counters only: a line that is no ``name: integer`` makes the file unreadable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "ethtool -S"

_LINE = re.compile(r"^(\S(?:.*\S)?):\s+(\d+)$")


@dataclass(frozen=True)
class EthtoolStats:
    counters: dict[str, int]


def parse_ethtool_stats(text: str) -> EthtoolStats:
    require_text(TOOL, text)
    counters: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line == "NIC statistics:":
            continue
        m = _LINE.match(line)
        if not m:
            raise ParseError(TOOL, f"line {number} is not 'name: count': {line[:80]!r}")
        counters[m.group(1)] = int(m.group(2))
    if not counters:
        raise ParseError(TOOL, "no counter listed")
    return EthtoolStats(counters)
