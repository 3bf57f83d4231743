"""The typed results of certify, evaluate and scan, kept typed until they are rendered.

certify and evaluate judge nodes into NodeReports; scan adds each node's drift and
escalations as fields; gpuboot.ids adds the fixes of each failed rule. The JSON documents
(--json, report.json, the bundle's manifest) are made by ``to_dict`` where they are
written, and a document read back from disk (an old run's report.json) is parsed into the
same types by ``from_dict``: one shape in memory. A light module (no rule, no engine), so
the report writers, the join gate and `gpuboot status` read it without importing certify
(nor, until a report is read, the rules' Finding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot.verdict import BAD, Status

if TYPE_CHECKING:  # imported where findings are made: `gpuboot status` loads no rule module
    from gpuboot.checks.base import Finding


@dataclass(frozen=True)
class Drift:
    """What changed for one node since its previous scan (gpuboot.scan.drift)."""

    previous_scan: str | None
    new: tuple[str, ...] = ()
    still: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "previous_scan": self.previous_scan,
            "new": list(self.new),
            "still": list(self.still),
            "cleared": list(self.cleared),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Drift:
        return cls(
            doc.get("previous_scan"),
            tuple(doc.get("new") or ()),
            tuple(doc.get("still") or ()),
            tuple(doc.get("cleared") or ()),
        )


@dataclass(frozen=True)
class Escalation:
    """A hardware fault back after N reboots (gpuboot.escalation): inspection / RMA."""

    fault: str
    what: str
    rule: str
    boots: int
    first_seen: str | None
    action: str
    new: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Escalation:
        return cls(**{k: doc.get(k) for k in cls.__dataclass_fields__})


def _finding(doc: Mapping[str, Any]) -> Finding:
    from gpuboot.checks.base import Finding

    return Finding(
        rule=str(doc.get("rule")),
        title=str(doc.get("title") or ""),
        status=str(doc.get("status")),
        reason=str(doc.get("reason") or ""),
        action=str(doc.get("action") or ""),
        severity=str(doc.get("severity") or Status.FAIL),
        applicable=bool(doc.get("applicable", True)),
    )


@dataclass(frozen=True)
class NodeReport:
    """One node's verdict, its findings (their figures held once, in ``measurements``:
    each names its rule), the fixes of its failed rules and, from a scan, its drift and
    escalations (None: not a scan's node)."""

    host: str
    verdict: str
    findings: tuple[Finding, ...]
    measurements: tuple[dict[str, Any], ...] = ()
    remedies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # rule -> fix
    drift: Drift | None = None
    unjudged: tuple[str, ...] = ()  # rules the harness could not judge this scan
    escalations: tuple[Escalation, ...] | None = None
    recommended_action: str | None = None
    executor: str = "controller"  # who collected its evidence (an executor's name)
    # what a scan reads in the node's evidence besides the rules (its boot, faults and
    # counters: gpuboot.scan), read where the rules' parses are at hand; not in the document
    observed: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def judged(cls, host: str, findings: list[Finding], verdict: str) -> NodeReport:
        """A node as the rules judged it: each finding's figures moved to the node's."""
        measurements = tuple({**m, "rule": f.rule} for f in findings for m in f.measurements)
        kept = tuple(replace(f, measurements=[]) for f in findings)
        return cls(host, verdict, kept, measurements)

    def remedy(self, finding: Finding) -> Mapping[str, Any]:
        """``fix_tasks`` (and ``remediate``) of a failed finding, once gpuboot.ids linked it."""
        return self.remedies.get(finding.rule, {})

    def failing(self) -> dict[str, str]:
        """rule -> FAIL/ERROR of this node's findings."""
        return {f.rule: f.status for f in self.findings if f.status in BAD}

    def to_dict(self) -> dict[str, Any]:
        """Findings as {rule,title,status,reason,action,severity,applicable} (plus their
        fixes); every measured figure (median, band, margin, % of the physical limit) in
        ``measurements``; a scan's drift, unjudged rules and escalations after them."""
        findings = [
            {**{k: v for k, v in f.__dict__.items() if k != "measurements"}, **self.remedy(f)}
            for f in self.findings
        ]
        out: dict[str, Any] = {
            "host": self.host,
            "verdict": self.verdict,
            "findings": findings,
            "measurements": [dict(m) for m in self.measurements],
        }
        if self.drift is not None:
            out["drift"] = self.drift.to_dict()
            out["unjudged"] = list(self.unjudged)
        if self.escalations is not None:
            out["escalations"] = [e.to_dict() for e in self.escalations]
        if self.recommended_action is not None:
            out["recommended_action"] = self.recommended_action
        out["executor"] = self.executor
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> NodeReport:
        findings = [f for f in doc.get("findings") or [] if isinstance(f, Mapping)]
        remedies = {
            str(f.get("rule")): {k: f[k] for k in ("fix_tasks", "remediate") if k in f}
            for f in findings
            if "fix_tasks" in f or "remediate" in f
        }
        escalations = doc.get("escalations")
        return cls(
            host=str(doc.get("host")),
            verdict=str(doc.get("verdict")),
            findings=tuple(_finding(f) for f in findings),
            measurements=tuple(
                dict(m) for m in doc.get("measurements") or [] if isinstance(m, Mapping)
            ),
            remedies=remedies,
            drift=Drift.from_dict(doc["drift"]) if isinstance(doc.get("drift"), Mapping) else None,
            unjudged=tuple(doc.get("unjudged") or ()),
            escalations=None
            if escalations is None
            else tuple(Escalation.from_dict(e) for e in escalations),
            recommended_action=doc.get("recommended_action"),
            executor=str(doc.get("executor") or "controller"),
        )


def all_pass(nodes: tuple[NodeReport, ...]) -> bool:
    return all(n.verdict == Status.PASS for n in nodes)


@dataclass(frozen=True)
class RunReport:
    """A certify (or scan) run: the JSON `gpuboot certify` prints and keeps as report.json."""

    run_id: str | None  # None: a report read back that names no run
    run_dir: Path | None
    bundle: Path | None
    elapsed_s: float | None
    probes: str | None  # the run's override of each host's gpuboot_probes, if any
    nodes: tuple[NodeReport, ...]
    # the controller's CPU seconds by phase (gpuboot.engine.CPU_PHASES); None: not measured
    controller_cpu_s: Mapping[str, float] | None = None

    @property
    def passed(self) -> bool:
        return all_pass(self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir) if self.run_dir is not None else None,
            "bundle": str(self.bundle) if self.bundle is not None else None,
            "elapsed_s": self.elapsed_s,
            "controller_cpu_s": dict(self.controller_cpu_s) if self.controller_cpu_s else None,
            "passed": self.passed,
            "probes": self.probes,
            "nodes": [n.to_dict() for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> RunReport:
        """A report.json (or a report of that shape) read back; ValueError if it is none."""
        nodes = doc.get("nodes") if isinstance(doc, Mapping) else None
        if not isinstance(nodes, list):
            raise ValueError("not a certify report: no list of nodes")
        return cls(
            run_id=doc.get("run_id"),
            run_dir=Path(str(doc["run_dir"])) if doc.get("run_dir") else None,
            bundle=Path(str(doc["bundle"])) if doc.get("bundle") else None,
            elapsed_s=doc.get("elapsed_s"),
            probes=doc.get("probes"),
            controller_cpu_s=_cpu_phases(doc.get("controller_cpu_s")),
            nodes=tuple(NodeReport.from_dict(n) for n in nodes if isinstance(n, Mapping)),
        )


def _cpu_phases(value: Any) -> dict[str, float] | None:
    """A report's CPU by phase as read back: numbers only (anything else: not measured)."""
    if not isinstance(value, Mapping):
        return None
    kept = {
        str(k): float(v)
        for k, v in value.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    return kept or None


@dataclass(frozen=True)
class BundleReport:
    """`gpuboot evaluate`: a bundle judged again offline, and whether its manifest vouched."""

    bundle: str
    manifest: str  # what MANIFEST.json proved (certify._vouched), or missing, or ignored
    nodes: tuple[NodeReport, ...]

    @property
    def passed(self) -> bool:
        return all_pass(self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "manifest": self.manifest,
            "passed": self.passed,
            "nodes": [n.to_dict() for n in self.nodes],
        }
