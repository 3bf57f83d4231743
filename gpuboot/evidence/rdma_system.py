"""``rdma system show`` (iproute2): the RDMA subsystem's settings, one line of key/value pairs.

``netns shared copy-on-fork on``; older iproute2 prints ``netns shared`` alone, newer ones
add ``privileged-qkey off`` and ``monitor on``. The network namespace mode is ``shared``
(every namespace sees every RDMA device: the RDMA shared device plugin, macvlan/ipvlan) or
``exclusive`` (a device lives in one namespace: an SR-IOV VF moved into a pod).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "rdma system"
RDMA_SYSTEM_FILE = "rdma_system_show.txt"
RDMA_SYSTEM_COMMAND = "rdma system show"
NETNS_MODES = ("shared", "exclusive")


@dataclass(frozen=True)
class RdmaSystem:
    netns: str  # "shared" / "exclusive"
    fields: dict[str, str]


def parse_rdma_system(text: str) -> RdmaSystem:
    """The one settings line; anything else (a second line, a key without a value, a
    namespace mode iproute2 does not print) is unreadable, never a mode."""
    require_text(TOOL, text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise ParseError(TOOL, f"{len(lines)} lines, not the one settings line")
    words = lines[0].split()
    if len(words) % 2:
        raise ParseError(TOOL, f"a key without its value: {lines[0][:80]!r}")
    fields = dict(zip(words[::2], words[1::2], strict=True))
    netns = fields.get("netns")
    if netns not in NETNS_MODES:
        raise ParseError(TOOL, f"no netns mode (shared/exclusive) in {lines[0][:80]!r}")
    return RdmaSystem(netns, fields)
