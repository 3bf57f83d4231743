"""The rule framework: statuses, node context, findings and how a rule is evaluated.

A rule's check returns None (pass), a text (a violation at the rule's severity) or a
``Result`` when it decides the status itself (bandwidth bands, not-applicable, per-Xid
actions). Evidence that cannot be read raises a ``GpubootError``: the harness reports
ERROR, never FAIL.
"""

from __future__ import annotations

import contextvars
import fnmatch
import functools
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuboot.bundle.model import Evidence, ProbeOutput
from gpuboot.bundle.names import NVIDIA_VERSION_FILE, unit_active_file
from gpuboot.errors import GpubootError
from gpuboot.evidence._common import has_elision
from gpuboot.verdict import Status

# SKIPPED: a check that did not run (the SKU lacks the part, the probe level or the run left
# it out): it proves nothing, so it is never counted as passed; its reason says why.
PASS, WARN, FAIL, ERROR, SKIPPED = Status
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
    return Result(SKIPPED, f"not applicable: {why}", applicable=False)


Check = Callable[[Evidence, NodeContext], "str | Result | None"]


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str  # FAIL or WARN: what a violation makes the node
    action: str  # what the operator should do when it fails
    check: Check
    evidence: tuple[str, ...] = ()  # probe files (patterns) the rule reads, for the catalogue
    # The rule's check fails only on a fault it read (an Xid line, a pending remap), never
    # on something missing from what it read: such a fault stands even in output that is
    # not whole. A rule that can fail on an absence (a module, a GPU, a port not listed)
    # must leave it False, or a cut listing would read as a lost part.
    fault_first: bool = False

    def evaluate(self, evidence: Evidence, ctx: NodeContext) -> Finding:
        # A probe the rule reads that failed (timeout, non-zero exit) left output that may
        # be partial: the rule is ERROR, whatever that output says, unless it is a
        # fault_first rule that read a fault there (FAIL seen > ERROR unreadable > PASS).
        # Checked around the check so a rule that does not apply still says so.
        failed = incomplete_probe(evidence, self.evidence) or failed_probe(evidence, self.evidence)
        if not failed and not ctx.meta.get("excerpt"):
            failed = elided_probe(evidence, self.evidence)
        reading_cut = _READ_CUT.set(self.evidence if self.fault_first else ())
        try:
            out = self.check(evidence, ctx)
        except GpubootError:
            if failed:  # the probe's own failure says more than its output's parse error
                raise ProbeFailed(failed) from None
            raise
        finally:
            _READ_CUT.reset(reading_cut)
        if failed and not (isinstance(out, Result) and not out.applicable):
            seen = out if isinstance(out, str) else getattr(out, "reason", None)
            if self.fault_first and seen and (isinstance(out, str) or out.status == FAIL):
                action = (out.action if isinstance(out, Result) else None) or self.action
                reason = f"{seen} (seen in evidence that is not whole: {failed})"
                return Finding(self.id, self.title, FAIL, reason, action, self.severity)
            return self.error(ProbeFailed(failed))
        if out is None:
            return Finding(self.id, self.title, PASS, "ok", severity=self.severity)
        if isinstance(out, str):
            return Finding(self.id, self.title, self.severity, out, self.action, self.severity)
        action = "" if out.status in (PASS, SKIPPED) else (out.action or self.action)
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


# The parsed evidence of the node being judged, shared by the rules that read the same file
# (-q by eight rules, the package list by three, ibstat by two...). Keyed by the parser and
# everything it reads, so a hit is always that parser's answer; errors are not kept (each
# rule raises its own). Cleared before each node (rules.evaluate): a node is judged on its
# own work, never on a parse another node's identical file paid for. Bounded for callers
# that judge rule by rule over many hosts (the pytest-testinfra checks).
_NODE_MEMO: dict[tuple, Any] = {}
_NODE_MEMO_MAX = 512


def parsed(parser: Callable[..., Any], *args: Any) -> Any:
    """``parser(*args)``, once per node; the result is shared: read it, never change it."""
    key = (parser, *args)
    try:
        return _NODE_MEMO[key]
    except KeyError:
        pass
    value = parser(*args)
    if len(_NODE_MEMO) >= _NODE_MEMO_MAX:
        _NODE_MEMO.clear()
    _NODE_MEMO[key] = value
    return value


def start_node() -> None:
    """Forget the previous node's parses (rules.evaluate calls it per node)."""
    _NODE_MEMO.clear()


def probe(evidence: Evidence, name: str) -> ProbeOutput:
    """``name``'s output; MissingEvidence when absent, ProbeFailed when known to be cut."""
    try:
        out = evidence[name]
    except KeyError:
        raise MissingEvidence(f"probe {name} was not collected", where=name) from None
    return whole(name, out)


# The files the fault_first rule being judged declares: its check may read them cut,
# since Rule.evaluate keeps only a fault it read there (and is ERROR otherwise).
_READ_CUT: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("read_cut", default=())


def _cut(name: str, out: ProbeOutput) -> str:
    """Why ``out`` is known cut, unless the rule being judged may read it cut."""
    if out.incomplete and any(fnmatch.fnmatchcase(name, p) for p in _READ_CUT.get()):
        return ""
    return out.incomplete


def whole(name: str, out: ProbeOutput) -> ProbeOutput:
    """``out``, or ProbeFailed naming the file when its end marker says it was cut: read
    even by a rule that does not declare the file (a cut tail is not an absent part)."""
    if why := _cut(name, out):
        raise ProbeFailed(why, where=name)
    return out


def probes_matching(evidence: Evidence, pattern: str) -> dict[str, ProbeOutput]:
    """Every probe file whose name matches ``pattern`` (repeated runs, per-NIC files)."""
    return {n: o for n, o in sorted(evidence.items()) if fnmatch.fnmatchcase(n, pattern)}


def tool_failure(name: str, out: ProbeOutput) -> str | None:
    """Why a probe could not measure, from its end marker and exit code; None when it ran."""
    if why := _cut(name, out):
        return why
    if not isinstance(out.rc, int) or isinstance(out.rc, bool):
        return f"{name}: exit code not recorded ({out.rc!r})"
    if out.rc == 0:
        return None
    if out.rc == 127:
        return f"{name}: command not found (tool not installed)"
    if out.rc == 124:
        return f"{name}: timed out"
    text = (out.stderr + "\n" + out.stdout).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{name}: exit {out.rc}: {first[:200]}"  # every rule reading the file repeats it


# Exit codes that are the tool's answer, not a failure to measure: each tool's documented
# code for a state of the node that a rule judges (pattern of the probe file, test on it).
_SMI_NONE = ("No devices were found", "No MIG-enabled devices found", "No GPU instances found")
# nvidia-smi(1) RETURN VALUE: 8 power cables, 9 driver not loaded, 10 kernel interrupt
# issue, 12 NVML library missing, 14 infoROM corrupted, 15 GPU fallen off the bus, 18
# driver/library version mismatch; 127: nvidia-smi itself missing (driver userspace). These
# are the node's state (GPU-001 and STK-001 report them); 2/3/4/13 (our query, our
# permissions) and 255 are not.
_SMI_NODE_STATE = frozenset({8, 9, 10, 12, 14, 15, 18, 127})
# systemd's ActiveState words, which `systemctl is-active` prints whatever its exit code.
SYSTEMD_STATES = frozenset(
    {"active", "reloading", "inactive", "failed", "activating", "deactivating", "maintenance"}
)


def inactive_unit(evidence: Evidence, unit: str) -> str | None:
    """What is wrong with a unit a component runs, from ``systemctl is-active UNIT``: None
    when it is active, else its state; a state that cannot be read is the harness's."""
    file = unit_active_file(unit)
    state = probe(evidence, file).stdout.strip()
    if state not in SYSTEMD_STATES:
        raise ProbeFailed(f"systemctl is-active printed no unit state: {state[:60]!r}", where=file)
    return None if state == "active" else f"{unit} service is {state}"


_NCCL_WRONG = re.compile(r"Out of bounds values\s*:\s*[1-9]\d*\s+FAILED")


def _smi_answer(out: ProbeOutput) -> bool:
    text = out.stdout + out.stderr
    if out.rc == 6:  # "query unsuccessful": an answer only when it says there is nothing
        return any(m in text for m in _SMI_NONE)
    return out.rc in _SMI_NODE_STATE


ANSWER_EXITS: tuple[tuple[str, Callable[[ProbeOutput], bool]], ...] = (
    ("nvidia-smi*", _smi_answer),
    # exits 3 (4: no such unit) printing the unit's state when it is not active: FAB-001
    # judges that state
    ("systemctl_is-active_*", lambda o: o.rc in (3, 4) and o.stdout.strip() in SYSTEMD_STATES),
    # cat exits 1 with nothing on stdout when the file is absent: no nvidia module loaded
    (NVIDIA_VERSION_FILE, lambda o: o.rc == 1 and not o.stdout.strip()),
    # dcgmi diag exits 226 when a diagnostic test failed: DCG-001's finding
    ("dcgmi_diag*", lambda o: o.rc == 226),
    # nccl-tests exits 1 when results were wrong (data corruption): BW-004's finding
    ("all_reduce_perf*", lambda o: o.rc == 1 and bool(_NCCL_WRONG.search(o.stdout))),
    # pair runs: a failed run may be the partner's fault; the pair attribution (meta
    # "pairs") judges it, or check_ib_write_bw/check_tcp_bw from the file alone
    ("ib_write_bw*", lambda o: True),
    ("tcp_bw_*", lambda o: True),
)


def _declared(evidence: Evidence, patterns: tuple[str, ...]) -> Iterator[tuple[str, ProbeOutput]]:
    """The probe files a rule declares it reads, as (name, output)."""
    for name in _matching(patterns, tuple(evidence)):
        yield name, evidence[name]


# Each rule's declared patterns (every form of its tools' output) against the same node's
# file names, twice per rule (failed and elided probes): match them once per node.
@functools.lru_cache(maxsize=256)
def _matching(patterns: tuple[str, ...], names: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            match = _glob(pattern)
            out += sorted(n for n in names if match(n) and n not in out)
        elif pattern in names and pattern not in out:
            out.append(pattern)
    return tuple(out)


@functools.cache
def _glob(pattern: str) -> Callable[[str], re.Match[str] | None]:
    """fnmatch.fnmatchcase's test for one pattern, compiled once (no call per name)."""
    return re.compile(fnmatch.translate(pattern)).match


def elided_probe(evidence: Evidence, patterns: tuple[str, ...]) -> str | None:
    """A declared probe file holding an author's elision ("[...]"): no tool prints one, so
    on a node it is an answer trying to pass as an excerpt (whose parsers treat what is
    left out as unknown, not bad). Only a bundle marked as an excerpt may carry it."""
    for name, out in _declared(evidence, patterns):
        if parsed(has_elision, out.stdout):  # each rule asks of its files: once a node
            return f"{name}: holds an elision line '[...]' that no tool prints (not an excerpt)"
    return None


def incomplete_probe(evidence: Evidence, patterns: tuple[str, ...]) -> str | None:
    """A declared probe file known not to be whole (its end marker is missing or says
    otherwise: ProbeOutput.incomplete). A listing cut at a line boundary parses cleanly and
    its missing tail would read as a module, package or device that is not there."""
    return next(
        (out.incomplete for _n, out in _declared(evidence, patterns) if out.incomplete), None
    )


def failed_probe(evidence: Evidence, patterns: tuple[str, ...]) -> str | None:
    """Why one of the probe files matching ``patterns`` did not run to completion (timeout,
    non-zero exit, exit code not recorded), unless that exit is the tool's answer."""
    for name, out in _declared(evidence, patterns):
        if type(out.rc) is int and out.rc == 0:  # not False, not "0"
            continue
        why = tool_failure(name, out)
        if why and not any(
            fnmatch.fnmatchcase(name, p) and answer(out) for p, answer in ANSWER_EXITS
        ):
            return why
    return None


def forms_in(evidence: Evidence, kind: str) -> list[tuple[str, str, ProbeOutput]]:
    """(file, form, output) of every file of one evidence kind the node's evidence holds
    (evidence/forms.py): a rule reads whichever forms of its tool's output exist."""
    from gpuboot.evidence.forms import files_of

    return [(name, form, whole(name, evidence[name])) for name, form in files_of(kind, evidence)]


class EvidenceDisagrees(GpubootError):
    """Two forms of the same evidence say different things: neither can be trusted."""


def agree(kind: str, views: list[tuple[str, Any]]) -> None:
    """Raise EvidenceDisagrees (an ERROR naming both files) when two forms' views of the
    same facts differ; views are (file, comparable value)."""
    for (a, va), (b, vb) in itertools.pairwise(views):
        if va != vb:
            raise EvidenceDisagrees(
                f"evidence disagrees: {a} says {_say(va)}, {b} says {_say(vb)}",
                where=f"{a}, {b}",
                hint=f"two forms of the {kind} evidence differ; collect them again together",
            )


def _say(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 120 else text[:117] + "..."
