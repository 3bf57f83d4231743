"""``nvidia-smi nvlink -s`` (status) and ``nvidia-smi nvlink -e`` (error counters).

Real outputs vary: float ("26.562 GB/s") or integer ("25 GB/s") speeds, tab or space
indentation, ``<inactive>`` links, whole-GPU messages instead of link lines ("all links are
inactive", "not supported for Devices in MIG mode"), author elisions ``[...]`` and no
trailing newline. Speeds are per-link GB/s (gigabytes per second) as nvidia-smi prints them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuboot.errors import ParseError
from gpuboot.evidence._common import ELISION, require_text, snake

TOOL_S = "nvidia-smi nvlink -s"
TOOL_E = "nvidia-smi nvlink -e"

_GPU = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:\s*([^)]*)\))?\s*$")
_LINK = re.compile(r"^Link\s+(\d+):\s*(.*?)\s*$")
_SPEED = re.compile(r"^([\d.]+)\s*GB/s$")
_COUNTER = re.compile(r"^Link\s+(\d+):\s*(.+?):\s*(\S+)\s*$")
# A GPU that fell off the bus: nvidia-smi names it by PCI address in place of its block.
_LOST = re.compile(
    r"^Unable to determine the device handle for GPU\s*"
    r"([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])"
)


@dataclass(frozen=True)
class NvlinkLink:
    link: int
    active: bool
    speed_gbytes_s: float | None  # None when inactive or unreadable
    raw: str


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    uuid: str | None
    links: tuple[NvlinkLink, ...]
    all_links_inactive: bool = False  # NVML refused: "all links are inactive"
    mig_mode_unsupported: bool = False  # MIG enabled: NVLink cannot be queried at all
    messages: tuple[str, ...] = ()

    @property
    def inactive_links(self) -> tuple[int, ...]:
        return tuple(link.link for link in self.links if not link.active)

    @property
    def active_links(self) -> tuple[int, ...]:
        return tuple(link.link for link in self.links if link.active)


@dataclass(frozen=True)
class NvlinkStatus:
    gpus: tuple[NvlinkGpu, ...]
    elided: bool = False
    lost: tuple[str, ...] = ()  # PCI addresses of GPUs nvidia-smi could not open

    def gpu(self, index: int) -> NvlinkGpu:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(index)


@dataclass(frozen=True)
class NvlinkErrorGpu:
    index: int
    name: str
    uuid: str | None
    # link -> counter (snake_case, e.g. "replay_errors", "crc_errors") -> value
    counters: dict[int, dict[str, int | None]] = field(default_factory=dict)
    messages: tuple[str, ...] = ()

    def total(self, counter: str) -> int:
        return sum(v for c in self.counters.values() for k, v in c.items() if k == counter and v)


@dataclass(frozen=True)
class NvlinkErrors:
    gpus: tuple[NvlinkErrorGpu, ...]
    elided: bool = False  # the capture skipped links ("[...]"): absent links are unknown, not 0
    lost: tuple[str, ...] = ()  # PCI addresses of GPUs nvidia-smi could not open


def _split_gpus(
    tool: str, text: str
) -> tuple[list[tuple[re.Match[str], list[str]]], bool, tuple[str, ...]]:
    blocks: list[tuple[re.Match[str], list[str]]] = []
    elided, lost = False, []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        # each pattern tried only on a line starting as it does (the link lines are most)
        if line[0] == "U" and (lost_gpu := _LOST.match(line)):
            lost.append(lost_gpu.group(1))
        elif line[0] == "G" and (m := _GPU.match(line)):
            blocks.append((m, []))
        elif line[0] == "[" and ELISION.match(line):
            elided = True
        elif blocks:
            blocks[-1][1].append(line)
        else:
            raise ParseError(tool, f"unexpected line before any GPU header: {line[:80]!r}")
    if not blocks and not lost:
        raise ParseError(tool, "no 'GPU N: ...' header found", hint="is this nvlink output?")
    return blocks, elided, tuple(lost)


def parse_nvlink_status(text: str) -> NvlinkStatus:
    require_text(TOOL_S, text)
    blocks, elided, lost = _split_gpus(TOOL_S, text)
    gpus = []
    for m, lines in blocks:
        links, messages = [], []
        for line in lines:
            lm = _LINK.match(line)
            if not lm:
                messages.append(line)
                continue
            value = lm.group(2)
            sm = _SPEED.match(value)
            if sm:
                links.append(NvlinkLink(int(lm.group(1)), True, float(sm.group(1)), value))
            elif value.lower() in ("<inactive>", "inactive"):
                links.append(NvlinkLink(int(lm.group(1)), False, None, value))
            else:
                raise ParseError(TOOL_S, f"unreadable link state {value!r}")
        joined = " ".join(messages).lower()
        gpus.append(
            NvlinkGpu(
                index=int(m.group(1)),
                name=m.group(2),
                uuid=m.group(3),
                links=tuple(links),
                all_links_inactive="all links are inactive" in joined,
                mig_mode_unsupported="mig mode" in joined and "not supported" in joined,
                messages=tuple(messages),
            )
        )
    return NvlinkStatus(gpus=tuple(gpus), elided=elided, lost=lost)


def parse_nvlink_errors(text: str) -> NvlinkErrors:
    require_text(TOOL_E, text)
    blocks, elided, lost = _split_gpus(TOOL_E, text)
    gpus = []
    for m, lines in blocks:
        counters: dict[int, dict[str, int | None]] = {}
        messages = []
        for line in lines:
            cm = _COUNTER.match(line)
            if not cm:
                messages.append(line)
                continue
            link, counter, value = cm.groups()
            counters.setdefault(int(link), {})[snake(counter)] = (
                int(value) if value.isdigit() else None
            )
        gpus.append(
            NvlinkErrorGpu(int(m.group(1)), m.group(2), m.group(3), counters, tuple(messages))
        )
    return NvlinkErrors(gpus=tuple(gpus), elided=elided, lost=lost)


# ------------------------------------------------------------------ dcgmi nvlink
TOOL_DS = "dcgmi nvlink -s"
TOOL_DE = "dcgmi nvlink -e"
_D_ENTITY = re.compile(r"^(gpuId|physicalId)\s+(\d+):\s*$")
_D_STATES = re.compile(r"^[UDX_](?:\s+[UDX_])*$")
# "| GPU 0 |" (DCGM 3+) or "| GPU ID: 0 | NVLINK Error Counts |" (the user guide's layout)
_D_GPU = re.compile(r"^\|?\s*GPU(?:\s+ID:)?\s+(\d+)\s*(?:\|\s*(?:NVLINK Error Counts\s*\|?)?)?$")
_D_LINK = re.compile(r"^\|?\s*Link\s+(\d+)\b")
_D_COUNTER = re.compile(
    r"(CRC FLIT Error|CRC Data Error|Replay Error|Recovery Error|[A-Z][\w ]*Error)"
    r"\s*(?:\||=>|:)?\s*(?:=>\s*)?(\d+)"
)


def parse_dcgmi_nvlink_status(text: str) -> NvlinkStatus:
    """``dcgmi nvlink -s`` (``--link-status``): per GPU (``gpuId N:``) and NVSwitch a row of
    U (up), D (down), X (disabled), _ (not supported: no such link) per link slot. Switches
    are not GPUs and are left out; a GPU's ``_`` slots are links it does not have."""
    require_text(TOOL_DS, text)
    gpus: list[NvlinkGpu] = []
    entity: tuple[str, int] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _D_ENTITY.match(line):
            entity = (m.group(1), int(m.group(2)))
        elif entity and _D_STATES.match(line):
            if entity[0] == "gpuId":
                links = tuple(
                    NvlinkLink(i, c == "U", None, c) for i, c in enumerate(line.split()) if c != "_"
                )
                gpus.append(NvlinkGpu(entity[1], f"gpuId {entity[1]}", None, links))
            entity = None
    if not gpus and "No GPUs found" not in text:
        raise ParseError(TOOL_DS, "no 'gpuId N:' link-state row", hint="is this dcgmi nvlink -s?")
    return NvlinkStatus(gpus=tuple(gpus))


def parse_dcgmi_nvlink_errors(text: str) -> NvlinkErrors:
    """``dcgmi nvlink -e -g N`` (one GPU per run; files may hold several runs): the "NVLINK
    Error Counts" box, a ``GPU N`` header, then per ``Link N`` its CRC FLIT / CRC Data /
    Replay / Recovery error counts."""
    require_text(TOOL_DE, text)
    gpus: list[tuple[int, dict[int, dict[str, int | None]], list[str]]] = []
    link: int | None = None
    for raw in text.splitlines():
        line = raw.strip().strip("+-=")
        if not line:
            continue
        if m := _D_GPU.match(line):
            gpus.append((int(m.group(1)), {}, []))
            link = None
            continue
        if not gpus:
            continue
        if m := _D_LINK.match(line):
            link = int(m.group(1))
            gpus[-1][1].setdefault(link, {})
            line = line[m.end() :]
        for cm in _D_COUNTER.finditer(line):
            if link is not None:
                gpus[-1][1][link][snake(cm.group(1))] = int(cm.group(2))
        if line.startswith(("Warning", "Error")):
            gpus[-1][2].append(line)
    if not gpus:
        raise ParseError(TOOL_DE, "no 'GPU N' header", hint="is this dcgmi nvlink -e output?")
    return NvlinkErrors(
        gpus=tuple(
            NvlinkErrorGpu(i, f"gpuId {i}", None, counters, tuple(msgs))
            for i, counters, msgs in gpus
        )
    )
