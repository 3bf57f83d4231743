"""Kernel log (``dmesg`` in every timestamp style, ``journalctl -k``): NVIDIA Xid events and
PCIe "limited by ... link" bandwidth notices.

Timestamp styles handled: ``[   10.7]`` (monotonic), ``[Sun Feb 23 16:24:18 2025]`` (-T),
ISO (``--time-format iso``), ``kern  :warn  :`` (``--decode``), syslog/journal
(``Feb 14 05:03:42 host kernel:``) with indented continuation lines, and bare lines.
"GPU ... has fallen off the bus" without an Xid token is reported as Xid 79 (``derived``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text
from gpuboot.evidence.xid_catalog import XidInfo, xid_info

TOOL = "dmesg"

_PREFIXES = (
    (
        "decode",
        re.compile(
            r"^(kern|user|mail|daemon|auth|syslog|lpr|news|cron|authpriv|local\d)"
            r"\s*:(\w+)\s*:\s*(.*)$"
        ),
    ),
    ("monotonic", re.compile(r"^\[\s*(\d+\.\d+)\]\s?(.*)$")),
    ("ctime", re.compile(r"^\[(\w{3} \w{3}\s+\d+ [\d:]+ \d{4})\]\s?(.*)$")),
    ("iso", re.compile(r"^(\d{4}-\d\d-\d\dT[\d:]+(?:[,.]\d+)?(?:[+-]\d\d:?\d\d|Z)?)\s(.*)$")),
    ("syslog", re.compile(r"^(\w{3}\s+\d+\s+[\d:]+)\s+\S+\s+([^:\s]+):\s?(.*)$")),
)
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
    r"(?:\.[0-9A-Fa-f])?)\):\s*(\d+),\s*(.*)$"
)
_PID = re.compile(r"^pid=('?[^,]*?'?),\s*")
_NAME = re.compile(r"^name=([^,]*),\s*")
_GPU_PCI = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?"
    r"([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?)"
)
_LIMIT = re.compile(
    r"(?:pci\s+)?(\S+): ([\d.]+) Gb/s available PCIe bandwidth, limited by ([\d.]+) GT/s PCIe "
    r"x(\d+) link at (\S+) \(capable of ([\d.]+) Gb/s with ([\d.]+) GT/s PCIe x(\d+) link\)"
)
_ELISION = re.compile(r"^\[\s*(?:\.\.\.|…)\s*\]$")


@dataclass(frozen=True)
class XidEvent:
    code: int
    pci: str  # as printed, lower case ("0000:9b:00", "0000:18:00.0")
    pid: int | None
    process: str | None
    message: str
    timestamp: str | None
    derived: bool = False  # True: inferred from "fallen off the bus" text, no Xid token

    @property
    def pci_device(self) -> str:
        """domain:bus:device without the function, to match Xid and lspci spellings."""
        return self.pci.split(".")[0]

    @property
    def info(self) -> XidInfo:
        return xid_info(self.code)


@dataclass(frozen=True)
class PcieLimit:
    device: str
    available_gbits_s: float
    limited_by_gts: float
    limited_width: int
    limiting_device: str
    capable_gbits_s: float
    capable_gts: float
    capable_width: int


@dataclass(frozen=True)
class KernelLog:
    xids: tuple[XidEvent, ...]
    pcie_limits: tuple[PcieLimit, ...]
    timestamp_style: str | None
    elided: bool = False

    @property
    def xid_counts(self) -> Counter[int]:
        return Counter(x.code for x in self.xids)

    @property
    def categories(self) -> frozenset[str]:
        return frozenset(x.info.category for x in self.xids)

    def xids_for(self, pci: str) -> tuple[XidEvent, ...]:
        dev = pci.lower().split(".")[0]
        return tuple(x for x in self.xids if x.pci_device == dev)


def _split(line: str) -> tuple[str | None, str | None, str]:
    """(style, timestamp, message) for one physical line."""
    for style, rx in _PREFIXES:
        m = rx.match(line)
        if not m:
            continue
        if style == "decode":
            inner = m.group(3)
            for s2, rx2 in _PREFIXES[1:4]:
                if m2 := rx2.match(inner):
                    return f"decode+{s2}", m2.group(1), m2.group(2)
            return style, None, inner
        if style == "syslog":
            return (
                style,
                m.group(1),
                m.group(3) if m.group(2).startswith("kernel") else f"{m.group(2)}: {m.group(3)}",
            )
        return style, m.group(1), m.group(2)
    return None, None, line


def parse_kernel_log(text: str) -> KernelLog:
    require_text(TOOL, text)
    messages: list[tuple[str | None, str]] = []
    styles: Counter[str] = Counter()
    elided = False
    for raw in text.splitlines():
        if not raw.strip():
            continue
        if _ELISION.match(raw.strip()):
            elided = True
            continue
        style, ts, msg = _split(raw)
        if style is None and raw[:1] in (" ", "\t") and messages:
            # journalctl indents the continuation of a multi-line kernel message
            prev_ts, prev = messages[-1]
            messages[-1] = (prev_ts, f"{prev} {raw.strip()}")
            continue
        if style:
            styles[style] += 1
        messages.append((ts, msg.strip()))
    xids: list[XidEvent] = []
    limits: list[PcieLimit] = []
    recent_gpu: tuple[str, int] | None = None  # (pci, message index) of "NVRM: GPU <pci>"
    for i, (ts, msg) in enumerate(messages):
        if m := _XID.search(msg):
            rest, pid, name = m.group(3), None, None
            if pm := _PID.match(rest):
                pid = int(pm.group(1)) if pm.group(1).isdigit() else None
                rest = rest[pm.end() :]
            if nm := _NAME.match(rest):
                name = None if nm.group(1) == "<unknown>" else nm.group(1)
                rest = rest[nm.end() :]
            xids.append(XidEvent(int(m.group(2)), m.group(1).lower(), pid, name, rest, ts))
            continue
        if gm := _GPU_PCI.search(msg):
            recent_gpu = (gm.group(1).lower(), i)
        if "fallen off the bus" in msg and recent_gpu and i - recent_gpu[1] <= 3:
            xids.append(XidEvent(79, recent_gpu[0], None, None, msg, ts, derived=True))
            recent_gpu = None
        if lm := _LIMIT.search(msg):
            limits.append(
                PcieLimit(
                    lm.group(1),
                    float(lm.group(2)),
                    float(lm.group(3)),
                    int(lm.group(4)),
                    lm.group(5),
                    float(lm.group(6)),
                    float(lm.group(7)),
                    int(lm.group(8)),
                )
            )
    # A real Xid 79 line is often followed by "GPU ... has fallen off the bus": count it once.
    explicit = {x.pci_device for x in xids if x.code == 79 and not x.derived}
    xids = [x for x in xids if not (x.derived and x.pci_device in explicit)]
    if not styles and not xids and not limits and "NVRM" not in text:
        raise ParseError(
            TOOL, "no kernel log line recognised", hint="is this dmesg/journalctl -k output?"
        )
    return KernelLog(
        xids=tuple(xids),
        pcie_limits=tuple(limits),
        timestamp_style=styles.most_common(1)[0][0] if styles else None,
        elided=elided,
    )
