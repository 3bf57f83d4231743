"""Escalation over time (gpud's reboot threshold): a hardware fault that comes back on the
same part after reboots is not fixed by another reset or reboot.

A scan records per node its boot id and the hardware faults its evidence shows, each keyed
by kind, code and part: a hardware Xid that asks for a reset or reboot (catalogue severity
critical, judged by the code it names as its cause) on one GPU, a fatal NVSwitch SXid on
one switch, a row-remapping failure on one GPU. A GPU is keyed by its PCI address (a GPU that
fell off the bus is missing from nvidia-smi, so its UUID cannot key it); each scan also keeps
the UUID nvidia-smi shows at each address, and a different GPU at an address (the part was
replaced) starts that address's count afresh. A fault seen in scans of more
than N different boots (it came back after N reboots; default 2) turns the recommended
action into hardware inspection / RMA. A scan without a boot id (old history, a node that
did not say) counts no reboot: escalation never rests on a guess.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuboot.bundle.names import BOOT_ID_FILE, DMESG_FILE, META, SMI_Q_FILE
from gpuboot.errors import BadInput, GpubootError
from gpuboot.results import Escalation, NodeReport
from gpuboot.verdict import BAD, Status

DEFAULT_REBOOTS = 2
RMA_ACTION = "hardware inspection / RMA"
# the rule whose finding reports each kind of fault (its action is what escalation changes)
RULE_OF = {"xid": "XID-001", "sxid": "XID-002", "remap-failure": "ECC-003"}


def check_reboots(value: int) -> int:
    """The threshold as given on the command line; bad input before any host is touched."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(
            f"must be a whole number of reboots, at least 1 (got {value!r})",
            where="--rma-after-reboots",
            hint=f"the default is {DEFAULT_REBOOTS}: a fault back after 2 reboots means RMA",
        )
    return value


@dataclass(frozen=True)
class Observation:
    """What one node's evidence of one scan says: its boot id and its hardware faults
    (key -> what to tell an operator)."""

    boot_id: str | None = None
    faults: dict[str, str] = field(default_factory=dict)
    parts: dict[str, str] = field(default_factory=dict)  # PCI address -> GPU UUID seen there


def _pci(text: str) -> str:
    """domain:bus:device, 4-digit domain, no function: the Xid and -q spellings meet."""
    parts = text.lower().split(".")[0].split(":")
    if len(parts) < 3:
        return text.lower()
    domain, bus, dev = parts[-3:]
    try:
        return f"{int(domain, 16):04x}:{bus}:{dev}"
    except ValueError:
        return text.lower()


# the evidence files observe() reads
READS = (DMESG_FILE, SMI_Q_FILE, BOOT_ID_FILE)


def observe(evidence: dict[str, Any]) -> Observation:
    """Boot id and hardware faults in one node's evidence (gpuboot.bundle.model.Evidence). What
    cannot be read adds nothing: the rules already judge unreadable evidence ERROR."""
    from gpuboot.checks.base import parsed
    from gpuboot.checks.smi import smi_q
    from gpuboot.evidence.kernel_log import parse_kernel_log

    boot = evidence.get(BOOT_ID_FILE)
    boot_id = boot.stdout.strip()[:64] if boot is not None and boot.rc == 0 else ""
    gpus: dict[str, Any] = {}
    try:
        gpus = {_pci(g.bus_id): g for g in smi_q(evidence).gpus}
    except (GpubootError, KeyError):
        gpus = {}

    parts = {pci: str(g.uuid) for pci, g in gpus.items() if g.uuid}

    def gpu(pci: str) -> tuple[str, str]:
        """(key part, words) of the GPU at ``pci``."""
        pci = _pci(pci)
        return pci, f"{pci} ({parts[pci]})" if pci in parts else pci

    faults: dict[str, str] = {}
    dmesg = evidence.get(DMESG_FILE)
    log = None
    if dmesg is not None and dmesg.rc == 0 and dmesg.stdout.strip():
        try:
            log = parsed(parse_kernel_log, dmesg.stdout)  # the XID rule's parse, if it ran
        except GpubootError:
            log = None
    for x in log.xids if log else ():
        if x.info.category == "hardware" and x.severity == "critical":
            part, words = gpu(x.pci)
            faults[f"xid:{x.root}@{part}"] = f"Xid {x.root} on GPU {words}"
    for s in log.sxids if log else ():
        if s.fatal is not False:
            faults[f"sxid:{s.code}@{s.switch}"] = f"SXid {s.code} on NVSwitch {s.switch}"
    for pci, g in gpus.items():
        if g.remapped_rows is not None and g.remapped_rows.failure:
            part, words = gpu(pci)
            faults[f"remap-failure@{part}"] = f"row remapping failure on GPU {words}"
    return Observation(boot_id or None, faults, parts)


def observe_bundle(host_dir: Path) -> Observation:
    """:func:`observe` on a host directory of a bundle, reading only the files it needs
    (never a link or a FIFO, within the caps); nothing kept (unreachable node, unsafe
    files) observes nothing."""
    from gpuboot.bundle.store import host_bundle, read_file_capped

    try:
        files = {
            name: read_file_capped(host_dir / name)
            for name in (*READS, META)
            if os.path.lexists(host_dir / name)
        }
        evidence, _meta = host_bundle(files, str(host_dir))
    except GpubootError:
        return Observation()
    return observe(evidence)


# Bounds of one node's folded fault history, whatever the node reported (a scan history is
# compacted to this state, gpuboot.scan): a fault's older boots are counted, not listed (a
# boot id never comes back after later boots), and past the caps the least recently seen
# fault or GPU address is forgotten (a real node has a few dozen; more is noise or hostile).
BOOTS_KEPT = 16
MAX_FAULT_KEYS = 256
MAX_PARTS = 64
STATE_VERSION = 1


@dataclass
class FaultHistory:
    """Per node: for each fault key (least recently seen first), the distinct boot ids it
    was seen in (the last BOOTS_KEPT, in order; ``older`` counts the ones before) and when
    it was first seen. Fed record by record from the scan history."""

    boots: dict[str, list[str]] = field(default_factory=dict)
    first_seen: dict[str, str] = field(default_factory=dict)
    escalated: frozenset[str] = frozenset()  # keys escalated at the latest scan
    parts: dict[str, str] = field(default_factory=dict)  # PCI address -> last UUID seen
    older: dict[str, int] = field(default_factory=dict)  # key -> boots no longer listed

    def count(self, key: str, boot_id: str | None = None) -> int:
        """Distinct boots ``key`` was seen in, with ``boot_id`` (this scan's) if new."""
        seen = self.boots.get(key) or []
        extra = 1 if boot_id and boot_id not in seen else 0
        return self.older.get(key, 0) + len(seen) + extra

    def _forget(self, key: str) -> None:
        self.boots.pop(key, None)
        self.first_seen.pop(key, None)
        self.older.pop(key, None)

    def release(self) -> None:
        """An operator released the node: nothing stays escalated, every fault counts its
        boots afresh."""
        self.boots, self.first_seen, self.older = {}, {}, {}
        self.escalated = frozenset()

    def replaced(self, parts: dict[str, Any]) -> None:
        """Forget the faults of an address where another GPU is seen now: a new part."""
        for pci, uuid in parts.items():
            if not isinstance(uuid, str):
                continue
            if self.parts.get(pci, uuid) != uuid:
                for key in [k for k in self.boots if k.endswith(f"@{pci}")]:
                    self._forget(key)
            self.parts.pop(pci, None)  # most recently seen last
            self.parts[pci] = uuid
        while len(self.parts) > MAX_PARTS:
            del self.parts[next(iter(self.parts))]

    def add(
        self,
        time: str,
        boot_id: Any,
        faults: Iterable[Any],
        escalated: Any = (),
        parts: dict[str, Any] | None = None,
    ) -> None:
        self.replaced(parts or {})
        for key in faults:
            if not isinstance(key, str):
                continue
            self.first_seen.setdefault(key, time)
            seen = self.boots.pop(key, [])
            self.boots[key] = seen  # most recently seen last
            if isinstance(boot_id, str) and boot_id and boot_id not in seen:
                seen.append(boot_id)
                if len(seen) > BOOTS_KEPT:
                    del seen[0]
                    self.older[key] = self.older.get(key, 0) + 1
        while len(self.boots) > MAX_FAULT_KEYS:
            self._forget(next(iter(self.boots)))
        self.escalated = frozenset(k for k in escalated or () if isinstance(k, str))

    def to_json(self) -> dict[str, Any]:
        """The state a compacted history keeps (``escalated`` is its record's own)."""
        return {
            "v": STATE_VERSION,
            "faults": [
                [k, self.first_seen.get(k, ""), self.older.get(k, 0), list(b)]
                for k, b in self.boots.items()
            ],
            "parts": [[p, u] for p, u in self.parts.items()],
        }

    @classmethod
    def from_json(cls, doc: Any, escalated: Any = ()) -> FaultHistory:
        """The inverse of :meth:`to_json`; ValueError naming what is wrong with anything
        else (a compacted history is data to check: the caps hold, the types are exact)."""
        if not isinstance(doc, dict) or doc.get("v") != STATE_VERSION:
            raise ValueError(f"is not fault state version {STATE_VERSION}")
        faults, parts = doc.get("faults"), doc.get("parts")
        if not isinstance(faults, list) or len(faults) > MAX_FAULT_KEYS:
            raise ValueError(f"has 'faults' that is not a list of at most {MAX_FAULT_KEYS}")
        if not isinstance(parts, list) or len(parts) > MAX_PARTS:
            raise ValueError(f"has 'parts' that is not a list of at most {MAX_PARTS}")
        out = cls()
        for entry in faults:
            ok = isinstance(entry, list) and len(entry) == 4
            key, first, older, boots = entry if ok else (None, None, None, None)
            if not (
                isinstance(key, str)
                and isinstance(first, str)
                and type(older) is int
                and 0 <= older < 2**31
                and isinstance(boots, list)
                and len(boots) <= BOOTS_KEPT
                and all(isinstance(b, str) and b for b in boots)
                and len(set(boots)) == len(boots)
                and key not in out.boots
            ):
                what = "[key, first seen, older boots, boot ids]"
                raise ValueError(f"has a fault that is not {what}: {entry!r:.80}")
            out.boots[key], out.first_seen[key] = list(boots), first
            if older:
                out.older[key] = older
        for entry in parts:
            if not (
                isinstance(entry, list)
                and len(entry) == 2
                and all(isinstance(x, str) for x in entry)
            ):
                raise ValueError(f"has a part that is not [PCI address, UUID]: {entry!r:.80}")
            out.parts[entry[0]] = entry[1]
        out.escalated = frozenset(k for k in escalated or () if isinstance(k, str))
        return out


def escalations(
    now: Observation, before: FaultHistory | None, reboots: int = DEFAULT_REBOOTS
) -> list[Escalation]:
    """The faults of this scan that came back after ``reboots`` reboots: seen (this boot
    included) in more than ``reboots`` different boots; and the faults escalated before,
    which stay escalated until an operator releases the node (`gpuboot node release`): the
    reboot that clears an Xid from the kernel log does not mend the part. ``new``: not
    escalated at the node's previous scan."""
    if before is not None and now.parts:
        before = copy.deepcopy(before)
        before.replaced(now.parts)
    out = []
    for key, what in sorted(now.faults.items()):
        boots = (before or FaultHistory()).count(key, now.boot_id)
        if boots <= reboots:
            continue
        kind = key.split(":", 1)[0].split("@", 1)[0]
        out.append(
            Escalation(
                fault=key,
                what=what,
                rule=RULE_OF[kind],
                boots=boots,
                first_seen=(before.first_seen.get(key) if before else None),
                action=RMA_ACTION,
                new=not (before and key in before.escalated),
            )
        )
    for key in sorted((before.escalated if before else frozenset()) - now.faults.keys()):
        kind = key.split(":", 1)[0].split("@", 1)[0]
        if kind not in RULE_OF or key not in before.boots:
            continue  # a part replaced since (replaced() forgot it), or an unknown kind
        out.append(
            Escalation(
                fault=key,
                what=f"{key}, escalated at an earlier scan and not released since",
                rule=RULE_OF[kind],
                boots=before.count(key),
                first_seen=before.first_seen.get(key),
                action=RMA_ACTION,
                new=False,
            )
        )
    return out


def action_text(esc: Escalation) -> str:
    since = f" since {esc.first_seen}" if esc.first_seen else ""
    return (
        f"{RMA_ACTION}: {esc.what} came back after {esc.boots - 1} reboots (seen in "
        f"{esc.boots} boots{since}); another reset or reboot will not fix it"
    )


def apply(node: NodeReport, found: list[Escalation]) -> NodeReport:
    """``node`` with ``found`` recorded: its escalations, its recommended action, and the
    action of each finding that reports an escalated fault (text, HTML, JUnit show it)."""
    if not found:
        return replace(node, escalations=())
    findings = []
    for f in node.findings:
        mine = [e for e in found if e.rule == f.rule]
        if mine and f.status in (*BAD, Status.WARN):
            action = "; ".join(action_text(e) for e in mine) + (
                f" (was: {f.action})" if f.action else ""
            )
            f = replace(f, action=action)
        findings.append(f)
    return replace(node, findings=tuple(findings), escalations=found, recommended_action=RMA_ACTION)
