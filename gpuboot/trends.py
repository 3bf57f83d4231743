"""Early warning from trends in a node's scan history: WARN, never FAIL, when an error
counter grows faster than its SKU's rate, or a bandwidth drifts down against the node's own
earlier scans while still inside the band.

Each scan observes one node's counters (:func:`observe`): NVLink CRC / replay / recovery per
GPU link (``nvidia-smi nvlink -e``), corrected ECC errors and PCIe replays per GPU
(``nvidia-smi -q``), and the RoCE counters the node report measures per rail interface
(``ethtool -S``: pause frames, out-of-buffer). The history folds them into a :class:`Window`
per node: the samples of the node's current boot, thinned to at most MAX_SAMPLES. A
counter's rate is its growth from the oldest sample of the SKU's window (the profile's
``trends.window_hours``) that shows no reset since, to this scan, per hour. A reset is not
growth: a new boot id starts the window afresh (a scan without a boot id is a window of its
own: growth never rests on a guess), and so does a counter that went down (a driver reload,
a GPU reset, a part swapped). A counter not read at a scan is unknown there, never zero.

Corrected ECC: the AGGREGATE count. The volatile one restarts at every driver load, which on
Linux without persistence mode is every application run (NVML, nvmlEccCounterType_t): its
drops would restart the window all day and hide the growth. The aggregate count is the
device's lifetime count; only a swapped part makes it go down.

Thresholds are data in the profile (``trends:``, gpuboot/profiles/README.md), each with its
source. A counter family the profile gives no rate is not judged.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuboot.bundle.names import META, NVLINK_ERRORS_FILE, SMI_Q_FILE
from gpuboot.errors import GpubootError
from gpuboot.report._util import parse_iso
from gpuboot.verdict import Status

# counter -> (rule, words an operator reads). Names are the profile's keys under
# trends.rates; the RoCE ones are the canonical names of the report's ``ethtool -S`` counters.
COUNTERS: dict[str, tuple[str, str]] = {
    "nvlink_crc_errors": ("TRD-001", "NVLink CRC errors"),
    "nvlink_replay_errors": ("TRD-001", "NVLink replay errors"),
    "nvlink_recovery_errors": ("TRD-001", "NVLink recovery errors"),
    "ecc_corrected": ("TRD-002", "corrected ECC errors (aggregate)"),
    "pcie_replays": ("TRD-003", "PCIe replays"),
    "rx_pause_frames": ("TRD-004", "RoCE received pause frames"),
    "tx_pause_frames": ("TRD-004", "RoCE sent pause frames"),
    "rx_out_of_buffer": ("TRD-004", "RoCE out-of-buffer drops"),
}
BANDWIDTH_RULE = "TRD-005"
TITLES = {
    "TRD-001": "NVLink error counters not growing faster than the SKU's rate",
    "TRD-002": "corrected ECC errors not growing faster than the SKU's rate",
    "TRD-003": "PCIe replays not growing faster than the SKU's rate",
    "TRD-004": "RoCE pause / out-of-buffer counters not growing faster than the SKU's rate",
    BANDWIDTH_RULE: "bandwidth not drifting down against the node's own earlier scans",
}
ACTIONS = {
    "TRD-001": "a marginal link: reseat or replace the NVLink cable/board it names, run "
    "`dcgmi diag -r 3`; reset the GPUs if it keeps growing",
    "TRD-002": "a GPU's memory is wearing: watch row remapping (ECC-002/003) and plan an RMA "
    "with nvidia-bug-report if the rate holds",
    "TRD-003": "a marginal PCIe link: reseat the GPU or riser, check the slot's cabling and "
    "the BIOS link settings",
    "TRD-004": "congestion or a slow receiver on the rail: check the switch port's PFC/ECN "
    "settings (NIC-002) and the host's receive queues",
    BANDWIDTH_RULE: "the node is slowing down: certify it with probes (`gpuboot certify "
    "--probes full`) and compare with its earlier measurements",
}
# the NVLink counters as `nvidia-smi nvlink -e` names them (snake_case)
_NVLINK = {
    "crc_errors": "nvlink_crc_errors",
    "replay_errors": "nvlink_replay_errors",
    "recovery_errors": "nvlink_recovery_errors",
}
# Bounds of the folded state (it is compacted into the scan history): samples of one boot,
# the counters a node reports (an 8-GPU x 18-link board has 432 NVLink counters), the
# bandwidth measurements kept per figure.
MAX_SAMPLES = 32
MAX_COUNTERS = 2048
MAX_GROUPS = 256
RETENTION_HOURS = 168  # the longest window a profile may ask for
BANDWIDTH_KEPT = 8
MAX_FIGURES = 32
STATE_VERSION = 1


def _nonneg_int(v: Any) -> bool:
    return type(v) is int and 0 <= v < 2**63


@dataclass
class Sample:
    """One scan's counters: ``read`` the groups read whole (a counter of a read group that is
    not in ``values`` is 0: healthy counters cost nothing to keep), ``values`` counter id ->
    count (``<counter>@<where>``), ``n`` how many scans it stands for (thinning merges)."""

    time: str
    boot_id: str | None
    read: frozenset[str] = frozenset()
    values: dict[str, int] = field(default_factory=dict)
    n: int = 1

    def value(self, cid: str) -> int | None:
        if cid in self.values:
            return self.values[cid]
        return 0 if group_of(cid) in self.read else None

    def to_json(self) -> list[Any]:
        return [self.time, self.boot_id, sorted(self.read), self.values, self.n]

    @classmethod
    def from_json(cls, doc: Any) -> Sample:
        ok = isinstance(doc, list) and len(doc) == 5
        time, boot, read, values, n = doc if ok else (None,) * 5
        if not (
            isinstance(time, str)
            and (boot is None or isinstance(boot, str))
            and isinstance(read, list)
            and len(read) <= MAX_GROUPS
            and all(isinstance(g, str) for g in read)
            and isinstance(values, dict)
            and len(values) <= MAX_COUNTERS
            and all(isinstance(k, str) and _nonneg_int(v) for k, v in values.items())
            and type(n) is int
            and n >= 1
        ):
            raise ValueError(
                f"has a trend sample that is not [time, boot, read, values, n]: {doc!r:.80}"
            )
        return cls(time, boot, frozenset(read), dict(values), n)

    def to_record(self) -> dict[str, Any]:
        """What a scan record keeps of it (the scan's own time and boot id are the record's)."""
        return {"read": sorted(self.read), "values": self.values}


def group_of(cid: str) -> str:
    """The group a counter is read with: the GPU's NVLink block, the GPU's ``-q`` section.
    A RoCE counter is its own group: the report measures each one it read, 0 included."""
    counter, _, where = cid.partition("@")
    if counter.startswith("nvlink_"):
        return f"nvlink@{where.split(' link ')[0]}"
    if counter in ("ecc_corrected", "pcie_replays"):
        return f"{counter}@{where}"
    return cid


def _time(text: str) -> datetime | None:
    try:
        return parse_iso(text)
    except (TypeError, ValueError):
        return None


# the evidence files observe() reads
READS = (NVLINK_ERRORS_FILE, SMI_Q_FILE)


def observe(evidence: Mapping[str, Any], measurements: Iterable[Mapping[str, Any]] = ()) -> Sample:
    """The counters one node's evidence shows (time and boot id left for the caller). What
    cannot be read adds nothing: its counters are unknown at this scan."""
    from gpuboot.checks.base import parsed
    from gpuboot.checks.smi import smi_q
    from gpuboot.evidence.nvlink import parse_nvlink_errors

    read: set[str] = set()
    values: dict[str, int] = {}
    out = evidence.get(NVLINK_ERRORS_FILE)
    if out is not None and out.rc == 0 and not getattr(out, "incomplete", ""):
        try:
            errors = parsed(parse_nvlink_errors, out.stdout)  # the NVLink rule's, if it ran
        except GpubootError:
            errors = None
        # an elided capture shows some links only: the others are unknown, not 0
        for g in errors.gpus if errors and not errors.elided else ():
            if not g.counters:
                continue  # MIG mode, or no NVLink: nothing read
            if all(v is not None for c in g.counters.values() for v in c.values()):
                read.add(f"nvlink@GPU{g.index}")  # else a count it printed unreadably is unknown
            for link, counters in g.counters.items():
                for name, value in counters.items():
                    if name in _NVLINK and value:
                        values[f"{_NVLINK[name]}@GPU{g.index} link {link}"] = value
    try:
        gpus = smi_q(evidence).gpus
    except (GpubootError, KeyError):
        gpus = ()
    for i, g in enumerate(gpus):
        agg = g.ecc_aggregate
        corrected = _corrected(agg) if agg is not None else None
        for counter, value in (("ecc_corrected", corrected), ("pcie_replays", g.pcie_replays)):
            if value is not None:
                read.add(f"{counter}@GPU{i}")
                if value:
                    values[f"{counter}@GPU{i}"] = value
    for m in measurements:
        counter = m.get("counter")
        roce = counter in COUNTERS and COUNTERS[counter][0] == "TRD-004"
        if m.get("kind") == "counter" and roce and _nonneg_int(m.get("value")):
            values[f"{counter}@{m.get('device')}"] = m["value"]
    if len(values) > MAX_COUNTERS or len(read) > MAX_GROUPS:
        return Sample("", None)  # past any real node: not kept (a history line stays bounded)
    return Sample("", None, frozenset(read), values)


def observe_bundle(host_dir: Path, measurements: Iterable[Mapping[str, Any]] = ()) -> Sample:
    """:func:`observe` on a host directory of a bundle, reading only the files it needs (never
    a link or a FIFO, within the caps); nothing kept (an unreachable node) observes nothing."""
    from gpuboot.bundle.store import host_bundle, read_file_capped

    try:
        files = {
            name: read_file_capped(host_dir / name)
            for name in (*READS, META)
            if os.path.lexists(host_dir / name)
        }
        evidence, _meta = host_bundle(files, str(host_dir))
    except GpubootError:
        evidence = {}
    return observe(evidence, measurements)


def _corrected(counts: Any) -> int | None:
    """A GPU's corrected ECC count: the total where the driver prints one, else SRAM + DRAM."""
    if counts.correctable_total is not None:
        return counts.correctable_total
    parts = [counts.sram_correctable, counts.dram_correctable]
    return sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None


@dataclass
class Window:
    """One node's folded trend state: the samples of its current boot (oldest first, at most
    MAX_SAMPLES, thinned to keep the oldest and spread the rest over RETENTION_HOURS) and
    its last BANDWIDTH_KEPT measurements per bandwidth figure ([time, value])."""

    samples: list[Sample] = field(default_factory=list)
    figures: dict[str, list[list[Any]]] = field(default_factory=dict)

    def add(self, sample: Sample) -> None:
        last = self.samples[-1] if self.samples else None
        if last is None or not sample.boot_id or last.boot_id != sample.boot_id:
            self.samples = [sample]  # a new boot (or none known): no growth across it
            return
        now = _time(sample.time)
        self.samples.append(sample)
        if now is not None:
            kept = [
                s
                for s in self.samples
                if (t := _time(s.time)) and _hours(t, now) <= RETENTION_HOURS
            ]
            self.samples = kept or [sample]
        spacing = RETENTION_HOURS / MAX_SAMPLES
        while len(self.samples) > 2:
            a, b = _time(self.samples[-3].time), _time(self.samples[-2].time)
            spread = a is not None and b is not None and _hours(a, b) >= spacing
            # a reading just after a counter went down is that counter's new base: kept
            if len(self.samples) <= MAX_SAMPLES and (spread or _dropped(*self.samples[-3:-1])):
                break
            # the sample before the newest merges into it: its scans counted there
            merged = self.samples.pop(-2)
            self.samples[-1].n += merged.n

    def add_figures(self, time: str, figures: Any) -> None:
        if not isinstance(figures, dict):
            return
        for name, fig in figures.items():
            if not (isinstance(name, str) and isinstance(fig, list) and fig):
                continue
            value = fig[0]
            if isinstance(value, int | float) and not isinstance(value, bool):
                kept = self.figures.setdefault(name, [])
                kept.append([time, float(value)])
                del kept[:-BANDWIDTH_KEPT]
        while len(self.figures) > MAX_FIGURES:
            del self.figures[next(iter(self.figures))]

    def to_json(self) -> dict[str, Any]:
        return {
            "v": STATE_VERSION,
            "samples": [s.to_json() for s in self.samples],
            "figures": self.figures,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Window:
        """The inverse of :meth:`to_json`; ValueError naming what is wrong with anything else."""
        if not isinstance(doc, dict) or doc.get("v") != STATE_VERSION:
            raise ValueError(f"is not trend state version {STATE_VERSION}")
        samples, figures = doc.get("samples"), doc.get("figures")
        if not isinstance(samples, list) or len(samples) > MAX_SAMPLES:
            raise ValueError(f"has trend 'samples' that is not a list of at most {MAX_SAMPLES}")
        if not isinstance(figures, dict) or len(figures) > MAX_FIGURES:
            raise ValueError(f"has trend 'figures' that is not a mapping of at most {MAX_FIGURES}")
        for name, points in figures.items():
            if not (
                isinstance(points, list)
                and len(points) <= BANDWIDTH_KEPT
                and all(
                    isinstance(p, list)
                    and len(p) == 2
                    and isinstance(p[0], str)
                    and isinstance(p[1], int | float)
                    and not isinstance(p[1], bool)
                    for p in points
                )
            ):
                raise ValueError(f"has trend figure {name!r:.40} that is not [[time, value], ...]")
        return cls([Sample.from_json(s) for s in samples], {k: list(v) for k, v in figures.items()})


def _dropped(before: Sample, after: Sample) -> bool:
    """Whether a counter ``before`` read went down by ``after`` (a reset between them)."""
    return any((v := after.value(c)) is not None and v < n for c, n in before.values.items())


def _hours(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds() / 3600


@dataclass(frozen=True)
class Growth:
    """One counter's growth over its window."""

    cid: str
    grew: int
    hours: float
    scans: int

    @property
    def per_hour(self) -> float:
        return self.grew / self.hours

    @property
    def counter(self) -> str:
        return self.cid.partition("@")[0]

    @property
    def where(self) -> str:
        return self.cid.partition("@")[2]


def growth(samples: list[Sample], cid: str, window_hours: float) -> Growth | None:
    """``cid``'s growth from the oldest sample within ``window_hours`` of the newest that
    shows no reset since (a value that went down starts the window after it); None where
    the newest sample did not read it or no earlier one did."""
    newest = samples[-1]
    v_now, t_now = newest.value(cid), _time(newest.time)
    if v_now is None or t_now is None:
        return None
    base: tuple[int, datetime] | None = None
    scans, later = newest.n, v_now
    for s in reversed(samples[:-1]):
        v, t = s.value(cid), _time(s.time)
        if v is None or t is None:
            continue  # not read then: the window goes on past it
        if _hours(t, t_now) > window_hours or v > later:
            break  # outside the window, or a reset between it and the next reading
        base, later = (v, t), v
        scans += s.n
    if base is None or _hours(base[1], t_now) <= 0:
        return None
    return Growth(cid, v_now - base[0], _hours(base[1], t_now), scans)


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:,.1f}".rstrip("0").rstrip(".")


def _span(hours: float) -> str:
    if hours >= 48:
        return f"{hours / 24:.1f} d"
    if hours >= 1:
        return f"{hours:.1f} h".replace(".0 h", " h")
    return f"{hours * 60:.0f} min" if hours * 60 >= 1 else f"{hours * 3600:.0f} s"


def _describe(g: Growth, threshold: float) -> str:
    words = COUNTERS[g.counter][1]
    return (
        f"{words} on {g.where} grew {_fmt(g.per_hour)}/h over {g.scans} scans "
        f"({_span(g.hours)}), threshold {_fmt(threshold)}/h"
    )


def family(counter: str) -> str:
    """The family a counter is read with (one NVLink block holds all three NVLink counters)."""
    return "nvlink" if counter.startswith("nvlink_") else counter


def _families(sample: Sample) -> set[str]:
    return {g.partition("@")[0] for g in sample.read} | {
        family(c.partition("@")[0]) for c in sample.values
    }


# a WARN names the fastest counters; the rest are counted
MAX_NAMED = 8


def judge(window: Window, profile: Mapping[str, Any], figures: Any = None) -> list[Any]:
    """The trend findings of a node whose window ends with this scan's sample (and, with
    ``figures``, this scan's bandwidth figures already added): per rule with a rate in the
    profile whose counters this scan read, WARN naming each counter above its rate, PASS,
    or SKIPPED while its window holds fewer than ``min_scans`` scans. Nothing for a node
    whose counters were not read, nor for a profile without ``trends``."""

    conf = profile.get("trends")
    if not isinstance(conf, Mapping):
        return []
    findings = _counter_findings(window, conf) if window.samples else []
    if (bw := _bandwidth(window, conf.get("bandwidth_drop"), figures)) is not None:
        findings.append(bw)
    return findings


def _counter_findings(window: Window, conf: Mapping[str, Any]) -> list[Any]:
    from gpuboot.checks.base import Finding

    rates = {c: r for c, r in (conf.get("rates") or {}).items() if c in COUNTERS}
    hours, need = float(conf["window_hours"]), int(conf["min_scans"])
    newest = window.samples[-1]
    t_now = _time(newest.time)
    recent = [
        s for s in window.samples if t_now and (t := _time(s.time)) and _hours(t, t_now) <= hours
    ]
    findings = []
    for rule in sorted({COUNTERS[c][0] for c in rates}):
        mine = {c for c in rates if COUNTERS[c][0] == rule}
        families = {family(c) for c in mine}
        if not families & _families(newest):
            continue  # not read at this scan: unknown, nothing said
        scans = sum(s.n for s in recent if families & _families(s))
        if scans < need:
            why = f"not judged yet: {scans} of {need} scans in this boot's {_span(hours)} window"
            findings.append(Finding(rule, TITLES[rule], Status.SKIPPED, why, severity=Status.WARN))
            continue
        over = []
        for cid in sorted({c for s in recent for c in s.values if c.partition("@")[0] in mine}):
            g = growth(window.samples, cid, hours)
            limit = float(rates[g.counter]["per_hour"]) if g else 0.0
            if g and g.scans >= need and g.grew > 0 and g.per_hour > limit:
                over.append((g.per_hour, _describe(g, limit)))
        if not over:
            ok = f"no counter grew faster than its rate over {scans} scans ({_span(hours)} window)"
            findings.append(Finding(rule, TITLES[rule], Status.PASS, ok, severity=Status.WARN))
            continue
        over.sort(key=lambda o: -o[0])
        named = [text for _rate, text in over[:MAX_NAMED]]
        if len(over) > MAX_NAMED:
            named.append(f"and {len(over) - MAX_NAMED} more counters above their rate")
        findings.append(
            Finding(rule, TITLES[rule], Status.WARN, "; ".join(named), ACTIONS[rule], Status.WARN)
        )
    return findings


def _bandwidth(window: Window, conf: Any, figures: Any) -> Any:
    """TRD-005: each figure this scan measured against the median of the node's earlier
    measurements of it; WARN where it is more than ``fraction`` below while still at or
    above its fail band (below it, the bandwidth rule FAILs already)."""
    from gpuboot.checks.base import Finding

    if not isinstance(conf, Mapping) or not isinstance(figures, dict) or not figures:
        return None
    drop, need = float(conf["fraction"]), int(conf["min_scans"])
    judged, slower = False, []
    for name, fig in sorted(figures.items()):
        value = fig[0] if isinstance(fig, list) and fig else None
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        unit = fig[1] if len(fig) > 1 and isinstance(fig[1], str) else ""
        fail_below = fig[2] if len(fig) > 2 else None
        earlier = window.figures.get(name, [])[:-1]  # the last point is this scan's
        if len(earlier) + 1 < need:
            continue
        judged = True
        if isinstance(fail_below, int | float) and value < fail_below:
            continue
        base = statistics.median(v for _t, v in earlier)
        if base > 0 and value < base * (1 - drop):
            slower.append(
                f"{name} {value:g} {unit} is {1 - value / base:.0%} below this node's median "
                f"{base:g} {unit} over its {len(earlier)} earlier measured scans (since "
                f"{earlier[0][0]}), threshold {drop:.0%}"
            )
    title, rule = TITLES[BANDWIDTH_RULE], BANDWIDTH_RULE
    if slower:
        return Finding(rule, title, Status.WARN, "; ".join(slower), ACTIONS[rule], Status.WARN)
    if judged:
        why = f"every figure within {drop:.0%} of the node's own earlier median"
        return Finding(rule, title, Status.PASS, why, severity=Status.WARN)
    why = f"not judged yet: fewer than {need} measured scans of any figure"
    return Finding(rule, title, Status.SKIPPED, why, severity=Status.WARN)
