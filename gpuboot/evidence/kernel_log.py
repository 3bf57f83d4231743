"""Kernel log (``dmesg`` in every timestamp style, ``journalctl -k``): NVIDIA Xid events, NVSwitch
SXid events and PCIe "limited by ... link" bandwidth notices.

Timestamp styles handled: ``[   10.7]`` (monotonic), ``[Sun Feb 23 16:24:18 2025]`` (-T),
ISO (``--time-format iso``), ``kern  :warn  :`` (``--decode``), syslog/journal
(``Feb 14 05:03:42 host kernel:``) with indented continuation lines, and bare lines.
"GPU ... has fallen off the bus" without an Xid token is reported as Xid 79 (``derived``).

Facts an Xid line carries beyond its code: the driver's ``caused by previous Xid N`` (on Xid 45,
the channel teardown that follows an earlier fault: the event is about N), the ``Fatal`` /
``Nonfatal`` word of the NVLink5 Xids 144-150, and Xid 154's new recovery action.

SXids come from the nvidia-nvswitch driver (``nvidia-nvswitchN: SXid (PCI:<bdf>): <code>,
<Fatal|Non-fatal>, Link <n> <text>``, followed by ``Severity ...`` and ``Data {...}`` lines that
belong to it) and from fabric manager's log (``detected NVSwitch <fatal|non-fatal> error <code>
on fid .. on NVSwitch pci bus id <bdf> physical id .. port <n>``), the form NVIDIA's Fabric
Manager User Guide documents. An SXid line that states no severity is kept with ``fatal=None``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import ELISION, require_text
from gpuboot.evidence.xid_catalog import NVLINK5_CODES, RECOVERY_BUCKET, XidInfo, xid_info

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
    ("fabricmanager", re.compile(r"^\[(\w{3} \d+ \d{4} [\d:]+)\]\s?(.*)$")),
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
# Anchored on the notice's own words, not on the device before them: "(\S+): " searched
# from every position of a long token backtracks over the rest of it (quadratic time).
_LIMIT_WORDS = " Gb/s available PCIe bandwidth, limited by "
_LIMIT = re.compile(
    r": ([\d.]+) Gb/s available PCIe bandwidth, limited by ([\d.]+) GT/s PCIe "
    r"x(\d+) link at (\S+) \(capable of ([\d.]+) Gb/s with ([\d.]+) GT/s PCIe x(\d+) link\)"
)
_DEVICE_MAX = 256  # a PCI address or device name; a longer token is no device
_CAUSED_BY = re.compile(r"\bcaused by previous Xid (\d+)\s*$")  # no leading \s*: quadratic
_NVLINK5_SEVERITY = re.compile(r"^\S+\s+(Fatal|Non-?fatal)\b", re.I)
_RECOVERY = re.compile(
    r"recovery action changed from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)"
)
_BDF = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?"
_SXID = re.compile(rf"nvidia-nvswitch\d*:?\s+SXid \((?:PCI:)?({_BDF})\):\s*(\d+),\s*(.*)$")
_SXID_SEVERITY = re.compile(r"^(Fatal|Non-?fatal),\s*(?:Link\s+(-?\d+)\s*)?(.*)$", re.I)
_SXID_DETAIL = re.compile(r"^(?:Severity \d|Data \{)")  # continuation of the event above
_FM_SXID = re.compile(
    rf"detected NVSwitch (fatal|non-fatal) error (\d+) on fid \d+ on NVSwitch pci bus id "
    rf"({_BDF}) physical id \d+ port (\d+)",
    re.I,
)


@dataclass(frozen=True)
class XidEvent:
    code: int
    pci: str  # as printed, lower case ("0000:9b:00", "0000:18:00.0")
    pid: int | None
    process: str | None
    message: str
    timestamp: str | None
    derived: bool = False  # True: inferred from "fallen off the bus" text, no Xid token
    caused_by: int | None = None  # "caused by previous Xid N": the event is about N
    fatal: bool | None = None  # the Fatal/Nonfatal word of an NVLink5 Xid (144-150)
    recovery: str | None = None  # Xid 154: the recovery action the driver now asks for

    @property
    def pci_device(self) -> str:
        """domain:bus:device without the function, to match Xid and lspci spellings."""
        return self.pci.split(".")[0]

    @property
    def root(self) -> int:
        """The code the event is about: the cause a follow-on Xid names, else its own."""
        return self.caused_by or self.code

    @property
    def info(self) -> XidInfo:
        return xid_info(self.root)

    @property
    def severity(self) -> str:
        """The catalogue's weight, refined by what the line itself says: NVLink5 non-fatal
        errors need no recovery (NVIDIA's 144-150 decode), fatal ones a reset; Xid 154 weighs
        what its new recovery action asks."""
        if self.recovery is not None:
            return "info" if self.recovery == "None" else "critical"
        if self.fatal is not None:
            return "critical" if self.fatal else "info"
        return self.info.severity

    @property
    def action(self) -> str:
        """The resolution bucket for this event (see ``severity``)."""
        if self.recovery is not None:
            return RECOVERY_BUCKET.get(self.recovery, "CONTACT_SUPPORT")
        if self.fatal is not None:
            return "RESET_GPU" if self.fatal else "IGNORE"
        return self.info.action


@dataclass(frozen=True)
class SXidEvent:
    """One NVSwitch error report (its Severity/Data continuation lines folded in)."""

    code: int
    switch: str  # the NVSwitch's PCI address, lower case, 4-digit domain ("0000:05:00.0")
    fatal: bool | None  # None: the line does not say
    link: int | None  # NVSwitch port
    message: str
    timestamp: str | None
    source: str  # "kernel" (nvidia-nvswitch driver) or "fabricmanager" (its log)


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
    sxids: tuple[SXidEvent, ...] = ()

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


def _lines(text: str) -> Iterator[str]:
    """Each line, one at a time: a node's log may be millions of lines, and a list of them
    all (``splitlines``) would cost the controller several times the text's size."""
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start)
        if end < 0:
            end = size
        yield text[start:end].rstrip("\r")
        start = end + 1


def _messages(text: str, styles: Counter[str]) -> Iterator[tuple[str | None, str] | None]:
    """(timestamp, message) per kernel message, continuation lines folded in; None for an
    elision line. Counts each line's timestamp style in ``styles``."""
    current: tuple[str | None, list[str]] | None = None
    for raw in _lines(text):
        line = raw.strip()
        if not line:
            continue
        if ELISION.match(line):
            yield None
            continue
        style, ts, msg = _split(raw)
        if style is None and raw[:1] in (" ", "\t") and current:
            # journalctl indents the continuation of a multi-line kernel message; its parts
            # are joined once: adding each line to the joined text would copy it again for
            # every line (quadratic time)
            current[1].append(line)
            continue
        if style:
            styles[style] += 1
        if current:
            yield current[0], " ".join(current[1])
        current = (ts, [msg.strip()])
    if current:
        yield current[0], " ".join(current[1])


# A message none of the parsed events can be in is passed over with one search.
_WORTH_READING = re.compile(
    r"NVRM|SXid|fallen off the bus|Gb/s available PCIe bandwidth|detected NVSwitch", re.I
)


def parse_kernel_log(text: str) -> KernelLog:
    require_text(TOOL, text)
    styles: Counter[str] = Counter()
    elided = False
    xids: list[XidEvent] = []
    limits: list[PcieLimit] = []
    recent_gpu: tuple[str, int] | None = None  # (pci, message index) of "NVRM: GPU <pci>"
    sxids: list[SXidEvent] = []
    i = -1
    for message in _messages(text, styles):
        if message is None:
            elided = True
            continue
        i += 1
        ts, msg = message
        if not _WORTH_READING.search(msg):
            continue
        if m := _XID.search(msg):
            xids.append(_xid_event(m, ts))
            continue
        if sx := _sxid_event(msg, ts):
            sxids.append(sx)
            continue
        if gm := _GPU_PCI.search(msg):
            recent_gpu = (gm.group(1).lower(), i)
        if "fallen off the bus" in msg and recent_gpu and i - recent_gpu[1] <= 3:
            xids.append(XidEvent(79, recent_gpu[0], None, None, msg, ts, derived=True))
            recent_gpu = None
        if limit := _pcie_limit(msg):
            limits.append(limit)
    # A real Xid 79 line is often followed by "GPU ... has fallen off the bus": count it once.
    explicit = {x.pci_device for x in xids if x.code == 79 and not x.derived}
    xids = [x for x in xids if not (x.derived and x.pci_device in explicit)]
    if not styles and not xids and not sxids and not limits and "NVRM" not in text:
        raise ParseError(
            TOOL, "no kernel log line recognised", hint="is this dmesg/journalctl -k output?"
        )
    return KernelLog(
        xids=tuple(xids),
        pcie_limits=tuple(limits),
        timestamp_style=styles.most_common(1)[0][0] if styles else None,
        elided=elided,
        sxids=tuple(sxids),
    )


def _pcie_limit(msg: str) -> PcieLimit | None:
    """The bandwidth notice's figures and the device named right before them, if any."""
    if _LIMIT_WORDS not in msg:
        return None
    for m in _LIMIT.finditer(msg):
        before = msg[max(0, m.start() - _DEVICE_MAX) : m.start()]
        if not before or before[-1].isspace():
            continue
        device = before.split()[-1]
        if len(device) == _DEVICE_MAX:
            continue
        return PcieLimit(
            device,
            float(m.group(1)),
            float(m.group(2)),
            int(m.group(3)),
            m.group(4),
            float(m.group(5)),
            float(m.group(6)),
            int(m.group(7)),
        )
    return None


def _xid_event(m: re.Match[str], ts: str | None) -> XidEvent:
    code, rest, pid, name = int(m.group(2)), m.group(3), None, None
    if pm := _PID.match(rest):
        pid = int(pm.group(1)) if pm.group(1).isdigit() else None
        rest = rest[pm.end() :]
    if nm := _NAME.match(rest):
        name = None if nm.group(1) == "<unknown>" else nm.group(1)
        rest = rest[nm.end() :]
    caused_by = None
    if cm := _CAUSED_BY.search(rest):
        caused_by, rest = int(cm.group(1)), rest[: cm.start()].rstrip()
    fatal = None
    if code in NVLINK5_CODES and (fm := _NVLINK5_SEVERITY.match(rest)):
        fatal = fm.group(1).lower() == "fatal"
    recovery = rm.group(2).strip() if code == 154 and (rm := _RECOVERY.search(rest)) else None
    return XidEvent(
        code, m.group(1).lower(), pid, name, rest, ts, False, caused_by, fatal, recovery
    )


def _sxid_event(msg: str, ts: str | None) -> SXidEvent | None:
    """An SXid report from the nvswitch driver or fabric manager; None for other lines and
    for the driver's Severity/Data lines, which detail the report above them."""
    if m := _SXID.search(msg):
        rest = m.group(3).strip()
        if _SXID_DETAIL.match(rest):
            return None
        fatal, link = None, None
        if sm := _SXID_SEVERITY.match(rest):
            fatal = sm.group(1).lower() == "fatal"
            link = int(sm.group(2)) if sm.group(2) else None
            rest = sm.group(3).strip()
        return SXidEvent(int(m.group(2)), _bdf(m.group(1)), fatal, link, rest, ts, "kernel")
    if m := _FM_SXID.search(msg):
        fatal = m.group(1).lower() == "fatal"
        code, switch, port = int(m.group(2)), _bdf(m.group(3)), int(m.group(4))
        return SXidEvent(code, switch, fatal, port, msg[m.start() :], ts, "fabricmanager")
    return None


def _bdf(text: str) -> str:
    """Lower case with a 4-digit domain: fabric manager prints 8 ("00000000:86:00.0")."""
    domain, rest = text.lower().split(":", 1)
    return f"{domain[-4:]}:{rest}"
