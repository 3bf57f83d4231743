"""The rule framework: statuses, node context, findings and how a rule is evaluated.

A rule's check returns None (pass), a text (a violation at the rule's severity) or a
``Result`` when it decides the status itself (bandwidth bands, not-applicable, per-Xid
actions). Evidence that cannot be read raises a ``GpubootError``: the harness reports
ERROR, never FAIL.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuboot.collect import Evidence, ProbeOutput
from gpuboot.errors import GpubootError

PASS, WARN, FAIL, ERROR = "PASS", "WARN", "FAIL", "ERROR"
HARNESS_ACTION = "fix the harness or probe, then certify again"


class MissingEvidence(GpubootError):
    """A probe file the rule needs is absent from the evidence."""


class ProbeFailed(GpubootError):
    """A probe ran but could not measure (tool missing, timeout, pre-condition unmet)."""


@dataclass(frozen=True)
class NodeContext:
    host: str
    profile: dict[str, Any]
    hostvars: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # pair attribution, probe level

    def var(self, name: str, default: Any = None) -> Any:
        return self.hostvars.get(name, default)

    def enabled(self, component_var: str) -> bool:
        """True when the host's stack asks for a component (``<prefix>_enabled``)."""
        return bool(self.hostvars.get(component_var))

    @property
    def hardware(self) -> dict[str, Any]:
        return self.profile["hardware"]


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    status: str
    reason: str
    action: str = ""
    severity: str = FAIL
    applicable: bool = True
    measurements: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    """What a check returns when it sets the status itself."""

    status: str
    reason: str
    action: str | None = None  # None: the rule's own action
    applicable: bool = True
    measurements: list[dict[str, Any]] = field(default_factory=list)


def not_applicable(why: str) -> Result:
    return Result(PASS, f"not applicable: {why}", applicable=False)


Check = Callable[[Evidence, NodeContext], "str | Result | None"]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str  # FAIL or WARN: what a violation makes the node
    action: str  # what the operator should do when it fails
    check: Check
    evidence: tuple[str, ...] = ()  # probe files (patterns) the rule reads, for the catalogue

    def evaluate(self, evidence: Evidence, ctx: NodeContext) -> Finding:
        out = self.check(evidence, ctx)
        if out is None:
            return Finding(self.id, self.title, PASS, "ok", severity=self.severity)
        if isinstance(out, str):
            return Finding(self.id, self.title, self.severity, out, self.action, self.severity)
        action = "" if out.status == PASS else (out.action or self.action)
        if out.status == ERROR:
            action = out.action or HARNESS_ACTION
        return Finding(
            self.id,
            self.title,
            out.status,
            out.reason,
            action,
            self.severity,
            out.applicable,
            list(out.measurements),
        )

    def error(self, exc: Exception) -> Finding:
        return Finding(
            self.id, self.title, ERROR, f"cannot judge: {exc}", HARNESS_ACTION, self.severity
        )


def probe(evidence: Evidence, name: str) -> ProbeOutput:
    try:
        return evidence[name]
    except KeyError:
        raise MissingEvidence(f"probe {name} was not collected", where=name) from None


def probes_matching(evidence: Evidence, pattern: str) -> dict[str, ProbeOutput]:
    """Every probe file whose name matches ``pattern`` (repeated runs, per-NIC files)."""
    return {n: o for n, o in sorted(evidence.items()) if fnmatch.fnmatchcase(n, pattern)}


def tool_failure(name: str, out: ProbeOutput) -> str | None:
    """Why a probe could not measure, from its exit code; None when it ran."""
    if out.rc == 0:
        return None
    if out.rc == 127:
        return f"{name}: command not found (tool not installed)"
    if out.rc == 124:
        return f"{name}: timed out"
    text = (out.stderr + "\n" + out.stdout).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{name}: exit {out.rc}: {first}"
