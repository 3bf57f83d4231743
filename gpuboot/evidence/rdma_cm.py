"""RDMA CM's defaults per RDMA port, from configfs: ``grep -H . <configfs>/rdma_cm/*/ports/*/
default_roce_*``.

``/sys/kernel/config/rdma_cm/<dev>/ports/<port>/default_roce_mode`` holds ``RoCE v2`` or
``IB/RoCE v1``; ``default_roce_tos`` the ToS byte (decimal) RDMA CM connections leave with.
A device's directory exists once created (``mkdir``; MOFED's ``cma_roce_mode`` /
``cma_roce_tos`` create it): one not listed was never set, and RDMA CM uses the kernel's
defaults there (ToS 0, outside any lossless class). ``grep -H`` prints ``<path>:<value>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "rdma_cm configfs"
RDMA_CM_FILE = "configfs_rdma_cm.txt"

ROCE_MODES = ("RoCE v2", "IB/RoCE v1")  # what the kernel's configfs prints
_LINE = re.compile(r"^.*/rdma_cm/([^/\s]+)/ports/(\d+)/default_roce_(mode|tos):(.*)$")


@dataclass(frozen=True)
class CmPort:
    device: str
    port: int
    mode: str | None  # "RoCE v2", "IB/RoCE v1"; None: not read
    tos: int | None


def rdma_cm_command(configfs: str) -> str:
    """The probe (``configfs`` already shell-quoted): ``ls -d`` of rdma_cm itself first, so
    a configfs not mounted (or rdma_cm not loaded) fails the probe instead of reading as a
    node that set no device; then every created device's two files."""
    files = " ".join(
        f"{configfs}/rdma_cm/*/ports/*/default_roce_{leaf}" for leaf in ("mode", "tos")
    )
    return f"ls -d {configfs}/rdma_cm && {{ grep -sH . {files}; true; }}"


def parse_rdma_cm(text: str) -> dict[tuple[str, int], CmPort]:
    """(device, port) -> its defaults. The listing starts with the rdma_cm directory
    (``ls -d``): without it the text is not this probe's. A line that is no
    ``.../rdma_cm/<dev>/ports/<n>/default_roce_{mode,tos}:<value>`` is unreadable."""
    lines = [ln.strip() for ln in require_text(TOOL, text).splitlines() if ln.strip()]
    if not lines[0].endswith("/rdma_cm") or ":" in lines[0]:
        raise ParseError(TOOL, f"no rdma_cm directory listed first: {lines[0][:80]!r}")
    found: dict[tuple[str, int], dict[str, str]] = {}
    for number, raw in enumerate(lines[1:], start=2):
        m = _LINE.match(raw)
        if not m:
            raise ParseError(TOOL, f"line {number} is no rdma_cm default: {raw[:80]!r}")
        found.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = m.group(4).strip()
    out = {}
    for key, values in found.items():
        tos, mode = values.get("tos"), values.get("mode")
        if mode is not None and mode not in ROCE_MODES:
            raise ParseError(TOOL, f"{key[0]} port {key[1]}: mode {mode[:20]!r} is no RoCE mode")
        if tos is not None and not re.fullmatch(r"\d{1,3}", tos):
            raise ParseError(TOOL, f"{key[0]} port {key[1]}: ToS {tos[:20]!r} is no number")
        out[key] = CmPort(key[0], key[1], mode, None if tos is None else int(tos))
    return out
