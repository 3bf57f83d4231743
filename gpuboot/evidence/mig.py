"""``nvidia-smi mig -lgip`` (GPU instance profiles), ``-lgi`` (GPU instances) and ``-lci``
(compute instances). The box-drawn tables differ in width between drivers, so rows are
read by shape, not by column offsets. "No MIG-enabled devices found" and "No GPU/compute
instances found" are facts (empty results), not parse errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

_PROFILE = re.compile(
    r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$"
)
_PROFILE_2ND = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s*\|$")
_GI = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")
_CI = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")
_NONE = re.compile(r"no (mig-enabled devices|gpu instances|compute instances)[^|]*found", re.I)


@dataclass(frozen=True)
class MigProfile:
    gpu: int
    name: str  # "1g.5gb", "1g.5gb+me"
    profile_id: int
    instances_free: int
    instances_total: int
    memory_gib: float
    p2p: bool
    sm: int
    dec: int
    enc: int
    ce: int | None
    jpeg: int | None
    ofa: int | None


@dataclass(frozen=True)
class GpuInstance:
    gpu: int
    name: str
    profile_id: int
    instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True)
class ComputeInstance:
    gpu: int
    gpu_instance_id: int
    name: str
    profile_id: int
    instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True)
class MigListing:
    """Result of a mig listing. ``no_mig_devices``: the GPU(s) are not in MIG mode."""

    items: tuple
    no_mig_devices: bool = False
    none_found_message: str | None = None


def _lines(tool: str, text: str) -> tuple[list[str], str | None]:
    require_text(tool, text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    none = next((m.group(0) for ln in lines if (m := _NONE.search(ln))), None)
    return lines, none


def _check(tool: str, items: list, none: str | None, marker: str, text: str) -> None:
    if not items and none is None:
        if marker.lower() in text.lower():
            raise ParseError(tool, "table header found but no rows could be read")
        raise ParseError(tool, "no MIG table found", hint="is this nvidia-smi mig output?")


def parse_mig_lgip(text: str) -> MigListing:
    tool = "nvidia-smi mig -lgip"
    lines, none = _lines(tool, text)
    items: list[MigProfile] = []
    for i, ln in enumerate(lines):
        m = _PROFILE.match(ln)
        if not m:
            continue
        second = _PROFILE_2ND.match(lines[i + 1]) if i + 1 < len(lines) else None
        ce, jpeg, ofa = (int(second.group(k)) for k in (1, 2, 3)) if second else (None,) * 3
        items.append(
            MigProfile(
                gpu=int(m.group(1)),
                name=m.group(2),
                profile_id=int(m.group(3)),
                instances_free=int(m.group(4)),
                instances_total=int(m.group(5)),
                memory_gib=float(m.group(6)),
                p2p=m.group(7).lower() == "yes",
                sm=int(m.group(8)),
                dec=int(m.group(9)),
                enc=int(m.group(10)),
                ce=ce,
                jpeg=jpeg,
                ofa=ofa,
            )
        )
    _check(tool, items, none, "GPU instance profiles", text)
    return MigListing(tuple(items), bool(none and "mig-enabled" in none.lower()), none)


def parse_mig_lgi(text: str) -> MigListing:
    tool = "nvidia-smi mig -lgi"
    lines, none = _lines(tool, text)
    items = [
        GpuInstance(
            int(m.group(1)),
            m.group(2),
            int(m.group(3)),
            int(m.group(4)),
            int(m.group(5)),
            int(m.group(6)),
        )
        for ln in lines
        if (m := _GI.match(ln))
    ]
    _check(tool, items, none, "GPU instances", text)
    return MigListing(tuple(items), bool(none and "mig-enabled" in none.lower()), none)


def parse_mig_lci(text: str) -> MigListing:
    tool = "nvidia-smi mig -lci"
    lines, none = _lines(tool, text)
    items = [
        ComputeInstance(
            int(m.group(1)),
            int(m.group(2)),
            m.group(3),
            int(m.group(4)),
            int(m.group(5)),
            int(m.group(6)),
            int(m.group(7)),
        )
        for ln in lines
        if (m := _CI.match(ln))
    ]
    _check(tool, items, none, "Compute instances", text)
    return MigListing(tuple(items), bool(none and "mig-enabled" in none.lower()), none)
