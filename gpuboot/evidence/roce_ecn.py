"""RoCE congestion control (DCQCN) switches of an mlx5 port, read from sysfs with
``grep -H . /sys/class/net/<netdev>/ecn/roce_{np,rp}/enable/*``.

The mlx5 driver exposes one file per protocol and priority (NVIDIA's ECN documentation:
``/sys/class/net/<interface>/ecn/<protocol>/enable/<X>``, protocol ``roce_np`` for the
notification point, ``roce_rp`` for the reaction point, X the priority 0..7) holding
``1`` or ``0``; ``grep -H`` prints each as ``<path>:<value>``.
"""

from __future__ import annotations

import re

from gpuboot.errors import ParseError

_LINE = re.compile(r"^.*/ecn/(roce_np|roce_rp)/enable/([0-7]):\s*([01])\s*$")


def parse_ecn_enable(text: str) -> dict[tuple[str, int], bool]:
    """(protocol, priority) -> enabled, for every file the grep printed."""
    switches: dict[tuple[str, int], bool] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line)
        if not m:
            raise ParseError("ecn sysfs", f"unreadable line: {line[:100]!r}")
        switches[(m.group(1), int(m.group(2)))] = m.group(3) == "1"
    if not switches:
        raise ParseError("ecn sysfs", "no ECN switch listed (no mlx5 RoCE port?)")
    return switches
