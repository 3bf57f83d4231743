"""``lspci -n`` / ``-nn`` / ``-D`` (with or without ``-d VENDOR:``, ``-k``): the PCI
functions the bus enumerates, whatever a driver makes of them.

One line per function: ``19:00.0 0302: 10de:2330 (rev a1)`` (``-n``), with the domain
first under ``-D`` or when it is not 0000 (``0000:19:00.0 ...``), or
``19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330]
(rev a1)`` (``-nn``: names with the numbers in brackets; a device name may itself hold
brackets, so the ids are the LAST bracket pair). ``-k``/``-v`` detail lines are indented
and skipped. Plain ``lspci`` (names only, no ids) cannot be read: ParseError. An empty
listing is lspci's answer for "no such device" (exit 0), not an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError

TOOL = "lspci"

_ADDR = r"(?P<addr>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_REV = r"(?:\s+\(rev (?P<rev>[0-9a-fA-F]{2})\))?"
_PROG = r"(?:\s+\(prog-if [^)]*\))?"
_N = re.compile(
    rf"^{_ADDR}\s+(?P<cls>[0-9a-fA-F]{{4}}):\s+(?P<ven>[0-9a-fA-F]{{4}}):(?P<dev>[0-9a-fA-F]{{4}})"
    rf"{_REV}{_PROG}\s*$"
)
_NN = re.compile(
    rf"^{_ADDR}\s+(?P<cname>[^[]*?)\s*\[(?P<cls>[0-9a-fA-F]{{4}})\]:\s+(?P<name>.*?)\s*"
    rf"\[(?P<ven>[0-9a-fA-F]{{4}}):(?P<dev>[0-9a-fA-F]{{4}})\]{_REV}{_PROG}\s*$"
)

# PCI class codes (PCI Code and ID Assignment Specification): what each function is.
GPU_CLASSES = frozenset({"0300", "0302"})  # VGA-compatible, 3D controller
NIC_CLASSES = frozenset({"0200", "0207"})  # Ethernet, InfiniBand
BRIDGE_OTHER = "0680"  # "other bridge": how an NVSwitch enumerates (not a GPU)
NVIDIA, MELLANOX = "10de", "15b3"


@dataclass(frozen=True)
class PciFunction:
    address: str  # "0000:19:00.0": domain always, lower case
    cls: str  # "0302"
    vendor: str  # "10de"
    device: str  # "2330"
    rev: str | None = None
    name: str | None = None  # -nn only: "NVIDIA Corporation GH100 [H100 SXM5 80GB]"

    @property
    def ids(self) -> str:
        return f"{self.vendor}:{self.device}"


def bus_address(text: str) -> str:
    """Any PCI address form (``19:00.0``, ``0000:19:00.0``, nvidia-smi's
    ``00000000:19:00.0``) as ``0000:19:00.0``."""
    t = text.strip().lower()
    parts = t.split(":")
    if len(parts) == 2:
        return f"0000:{t}"
    domain = parts[0][-4:].rjust(4, "0")
    return f"{domain}:{parts[-2]}:{parts[-1]}"


def parse_lspci(text: str) -> tuple[PciFunction, ...]:
    """Every function listed, in lspci's order."""
    out: list[PciFunction] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line[:1] in (" ", "\t"):
            continue  # blank, or a -k/-v detail line of the function above
        m = _N.match(line) or _NN.match(line)
        if m is None:
            raise ParseError(
                TOOL,
                f"unreadable line: {line[:80]!r}",
                hint="collect `lspci -n` (or -nn): class and vendor:device as numbers",
            )
        g = m.groupdict()
        out.append(
            PciFunction(
                address=bus_address(g["addr"]),
                cls=g["cls"].lower(),
                vendor=g["ven"].lower(),
                device=g["dev"].lower(),
                rev=g["rev"].lower() if g.get("rev") else None,
                name=(g.get("name") or None),
            )
        )
    return tuple(out)


def gpus(functions: tuple[PciFunction, ...]) -> tuple[PciFunction, ...]:
    """NVIDIA display/3D functions: the GPUs (not their audio functions, not NVSwitches)."""
    return tuple(f for f in functions if f.vendor == NVIDIA and f.cls in GPU_CLASSES)


def nvswitches(functions: tuple[PciFunction, ...]) -> tuple[PciFunction, ...]:
    return tuple(f for f in functions if f.vendor == NVIDIA and f.cls == BRIDGE_OTHER)


def connectx(functions: tuple[PciFunction, ...]) -> tuple[PciFunction, ...]:
    """Mellanox/NVIDIA Networking network functions (ConnectX ports, BlueField NIC functions)."""
    return tuple(f for f in functions if f.vendor == MELLANOX and f.cls in NIC_CLASSES)


def ca_type(function: PciFunction) -> str:
    """The ``CA type`` ibstat prints for this function: MT + the device id in decimal
    (ConnectX-7 15b3:1021 -> MT4129)."""
    return f"MT{int(function.device, 16)}"
