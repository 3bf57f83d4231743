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
        m = _GPU.match(line)
        if lost_gpu := _LOST.match(line):
            lost.append(lost_gpu.group(1))
        elif m:
            blocks.append((m, []))
        elif ELISION.match(line):
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
            value = cm.group(3)
            counters.setdefault(int(cm.group(1)), {})[snake(cm.group(2))] = (
                int(value) if value.isdigit() else None
            )
        gpus.append(
            NvlinkErrorGpu(int(m.group(1)), m.group(2), m.group(3), counters, tuple(messages))
        )
    return NvlinkErrors(gpus=tuple(gpus), elided=elided, lost=lost)
