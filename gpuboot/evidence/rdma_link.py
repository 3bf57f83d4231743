"""``rdma link`` (``rdma link show``, iproute2): one line per RDMA port.

``link mlx5_3/1 state ACTIVE physical_state LINK_UP netdev gpu3rdma0``; an InfiniBand port
adds ``subnet_prefix``, ``lid``, ``sm_lid`` and ``lmc`` before its state. The netdev is printed
only where the RDMA device has one in the reader's network namespace (a pod sees its own).
No rate is printed: a rule judges the port's state from it, the rate from another form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "rdma link"

_LINK = re.compile(r"^link\s+(\S+?)/(\d+)((?:\s+\S+\s+\S+)*)\s*$")


@dataclass(frozen=True)
class RdmaLink:
    device: str  # "mlx5_3"
    port: int
    state: str | None  # "ACTIVE", "DOWN", "INIT", ...
    physical_state: str | None  # "LINK_UP", "POLLING", "DISABLED", ...
    netdev: str | None
    fields: dict[str, str]

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"


def parse_rdma_link(text: str) -> tuple[RdmaLink, ...]:
    """Every ``link`` line; any other non-blank line means this is not ``rdma link`` output
    (or it was cut mid-line): unreadable, never a port missing."""
    require_text(TOOL, text)
    links = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        m = _LINK.match(line)
        if not m:
            raise ParseError(
                TOOL, f"line {number} is not a 'link DEV/PORT key value ...' line: {line[:80]!r}"
            )
        words = m.group(3).split()
        fields = dict(zip(words[::2], words[1::2], strict=True))
        links.append(
            RdmaLink(
                m.group(1),
                int(m.group(2)),
                fields.get("state"),
                fields.get("physical_state"),
                fields.get("netdev"),
                fields,
            )
        )
    return tuple(links)
