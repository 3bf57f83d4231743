"""The remediation ladder as a pure state machine: which steps a failing node gets, in
which order, and when to stop. Nothing here touches a node; the caller injects the steps.

The rungs, lowest first: reconcile (re-run the roles of the drifted components), reset
the GPU or reboot the node as the Xid catalogue's resolution bucket asks (RESET_GPU: reset,
then reboot if the reset did not fix it; RESTART_BM: reboot), reinstall, quarantine. A step
is followed by a fresh certify of the node: PASS ends the climb, FAIL tries the next rung.
A fault that comes back after a step starts above the rungs already tried on it, a fault the
scan escalated (back after the reboot threshold, gpuboot.escalation) goes straight to
quarantine, and a node that had MAX_ACTIONS actions in WINDOW_S is quarantined instead of
acted on again. A quarantined node gets nothing more until a human releases it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

RECONCILE = "reconcile"
RESET = "reset"
REBOOT = "reboot"
REINSTALL = "reinstall"
QUARANTINE = "quarantine"
RUNGS = (RECONCILE, RESET, REBOOT, REINSTALL, QUARANTINE)
RELEASE = "release"  # a human's `gpuboot node release`: forgets the node's climb

MAX_ACTIONS = 3
WINDOW_S = 7 * 24 * 3600

# What a step (with the certify after it) came to.
PASSED = "passed"  # the node certified: back in service
FAILED = "failed"  # the step ran, or could not, and the node still fails: next rung
UNKNOWN = "unknown"  # the certify after it could not judge: never a reason to climb
HELD = "held"  # not done: the disruption gate, another Lease holder, a drain that timed out
DONE = "done"  # quarantine: recorded, no verdict to wait for
WOULD = "would"  # --dry-run
COUNTED = (PASSED, FAILED, UNKNOWN)  # results that were real actions on the node


@dataclass(frozen=True)
class Fault:
    """What is wrong with the node, as the ladder needs it."""

    key: str  # stable across scans: an escalation fault key, else the failing rule ids
    rules: tuple[str, ...] = ()
    bucket: str | None = None  # the Xid catalogue's resolution: RESET_GPU, RESTART_BM, ...
    gpus: tuple[str, ...] = ()  # PCI addresses of the GPUs a reset applies to
    drifted: bool = False  # components drifted from the pins: reconcile may fix it
    escalated: bool = False  # back after the reboot threshold: hardware


@dataclass(frozen=True)
class Past:
    """One earlier step on the node (remediation history or the node's actions annotation)."""

    at: float
    step: str
    result: str
    fault: str = ""


@dataclass(frozen=True)
class Facts:
    """The node's standing: any of these means no step at all."""

    quarantined: bool = False
    foreign: str | None = None  # another tool's marker (gpuboot.k8s.ownership.foreign_marker)
    cancelled: str | None = None  # a human undid gpuboot's take-out
    unreadable: str | None = None  # the node could not be read: nothing is known of it


@dataclass
class Taken:
    step: str
    result: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Climb:
    """One node's run of the ladder: what it skipped and why, or the steps it took."""

    fault: Fault
    skipped: str | None = None
    steps: list[Taken] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if self.skipped:
            return "skipped"
        return self.steps[-1].result if self.steps else "nothing to do"


def since_release(past: Iterable[Past]) -> list[Past]:
    """The steps after the latest release (a release starts the node afresh)."""
    out: list[Past] = []
    for p in sorted(past, key=lambda p: p.at):
        out = [] if p.step == RELEASE else [*out, p]
    return out


def actions_in_window(past: Iterable[Past], now: float) -> int:
    return sum(
        1
        for p in since_release(past)
        if p.step in RUNGS and p.step != QUARANTINE and p.result in COUNTED
        if now - WINDOW_S < p.at <= now
    )


def applicable(fault: Fault) -> list[str]:
    """The rungs that can help this fault, lowest first (quarantine always last)."""
    rungs = [RECONCILE] if fault.drifted else []
    if fault.bucket == "RESET_GPU" and fault.gpus:
        rungs.append(RESET)
    if fault.bucket in ("RESET_GPU", "RESTART_BM"):
        rungs.append(REBOOT)
    return [*rungs, REINSTALL, QUARANTINE]


def plan(fault: Fault, past: Iterable[Past], now: float) -> list[str]:
    """The steps to try on the node, in order (each only if the one before failed)."""
    recent = since_release(past)
    if fault.escalated:
        return [QUARANTINE]
    tried = {
        p.step
        for p in recent
        if p.fault == fault.key and p.result in COUNTED and now - WINDOW_S < p.at <= now
    }
    rungs = applicable(fault)
    top = max((rungs.index(s) for s in tried if s in rungs), default=-1)
    return rungs[top + 1 :]


def climb(
    facts: Facts,
    fault: Fault,
    past: Iterable[Past],
    now: float,
    do: Callable[[str], tuple[str, str]],
) -> Climb:
    """Run the ladder on one node: ``do(step)`` performs a step with its certify after it
    and says (result, detail). Stops at PASSED, at a step that was HELD, UNKNOWN or only
    WOULD be taken (a dry run plans on as if each step failed), and after quarantine."""
    out = Climb(fault)
    if facts.unreadable:
        out.skipped = f"cannot read the node: {facts.unreadable}"
        return out
    if facts.foreign:
        out.skipped = f"owned by another tool: {facts.foreign}"
        return out
    if facts.cancelled:
        out.skipped = f"cancelled by a human: {facts.cancelled}"
        return out
    if facts.quarantined:
        out.skipped = "quarantined: no automatic action until `gpuboot node release`"
        return out
    history = list(since_release(past))
    for step in plan(fault, history, now):
        if step != QUARANTINE and actions_in_window(history, now) >= MAX_ACTIONS:
            why = f"{MAX_ACTIONS} actions within {WINDOW_S // 86400} days"
            result, detail = do(QUARANTINE)
            out.steps.append(Taken(QUARANTINE, result, f"{why}; {detail}" if detail else why))
            return out
        result, detail = do(step)
        out.steps.append(Taken(step, result, detail))
        history.append(Past(now, step, FAILED if result == WOULD else result, fault.key))
        if step == QUARANTINE or result not in (FAILED, WOULD):
            return out
    return out
