"""``show_gids`` (MLNX_OFED / mlnx-tools): the GID table of every RDMA port.

``DEV PORT INDEX GID IPv4 VER DEV``: the RDMA device, port, GID index, the GID, the IPv4
address it maps (blank for an IPv6 GID), the RoCE version (v1/v2) and the netdev. The tool
ends with ``n_gids_found=N``: a table without it was cut (``complete`` False).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "show_gids"

_GID = re.compile(r"^[0-9a-f]{4}(?::[0-9a-f]{4}){7}$", re.I)
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_TRAILER = re.compile(r"^n_gids_found=(\d+)$")


@dataclass(frozen=True)
class Gid:
    device: str  # "mlx5_0", "rocep105s0"
    port: int
    index: int
    gid: str
    ipv4: str | None
    version: str  # "v1" / "v2"
    netdev: str | None


@dataclass(frozen=True)
class GidTable:
    gids: tuple[Gid, ...]
    complete: bool  # the tool's n_gids_found trailer was printed


def parse_show_gids(text: str) -> GidTable:
    require_text(TOOL, text)
    gids: list[Gid] = []
    complete = False
    for number, raw in enumerate(text.splitlines(), start=1):
        words = raw.split()
        if not words or words[0] in ("DEV", "---"):
            continue
        if m := _TRAILER.match(words[0]):
            complete = int(m.group(1)) == len(gids)
            continue
        if complete:
            raise ParseError(TOOL, f"line {number} follows the n_gids_found trailer")
        ipv4 = next((w for w in words[4:5] if _IPV4.match(w)), None)
        rest = words[5:] if ipv4 else words[4:]
        if len(words) < 5 or not words[1].isdigit() or not words[2].isdigit():
            raise ParseError(TOOL, f"line {number} is no GID row: {raw.strip()[:80]!r}")
        if not _GID.match(words[3]) or not rest or rest[0] not in ("v1", "v2") or len(rest) > 2:
            raise ParseError(TOOL, f"line {number} is no GID row: {raw.strip()[:80]!r}")
        gids.append(
            Gid(words[0], int(words[1]), int(words[2]), words[3].lower(), ipv4, rest[0],
                rest[1] if len(rest) > 1 else None)
        )  # fmt: skip
    return GidTable(tuple(gids), complete)
