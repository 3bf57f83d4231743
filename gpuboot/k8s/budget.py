"""The disruption gate: before gpuboot takes one more node out of service it counts, from
live Node objects, every node already out whoever made it so, and goes ahead only if one
more keeps within the limits: unavailable nodes per pool (``--max-unavailable``), per
failure domain (``--max-unavailable-per-domain``), and gpuboot's own take-outs in a recent
window (``--max-new-takeouts`` per ``--takeout-window``).

The window is rebuilt from the take-out times gpuboot wrote on the nodes
(``gpuboot.io/taken-out-at``, and the take-outs its bounded actions annotation records,
which a release leaves in place), so a restarted gpuboot still counts what it did before.
A scan, an install's drain, a remediation step and another tool's cordon all count against
the same limits: each gate reads the same Node objects.

What counts as out, from the Node alone:
- ``spec.unschedulable`` (a cordon; the ``node.kubernetes.io/unschedulable`` taint is its
  mirror), gpuboot's own taint or cordon;
- Ready False, or Unknown (pods cannot use it; gpuboot never acts on it), and the node
  lifecycle controller's ``not-ready`` / ``unreachable`` taints, which mirror Ready: one
  cause, counted once;
- any other NoSchedule / NoExecute taint, the kubelet's pressure taints included (new pods
  stay away: counting them errs towards fewer take-outs), except the taints that dedicate
  a node rather than take it out (``nvidia.com/gpu``, which GKE and NVIDIA's GPU operator
  docs put on every GPU node, and any the operator names with ``--ignore-taint``).
PreferNoSchedule is a preference, not unavailability.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuboot.errors import BadInput
from gpuboot.k8s import labels as L
from gpuboot.k8s.client import Api, list_nodes
from gpuboot.results import NodeReport
from gpuboot.verdict import Status

DEDICATED_TAINTS = ("nvidia.com/gpu",)
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
CORDON_TAINT = "node.kubernetes.io/unschedulable"
OUT_EFFECTS = ("NoSchedule", "NoExecute")
CAUSE_GPUBOOT, CAUSE_CORDON = "gpuboot", "cordoned"
CAUSE_NOT_READY, CAUSE_READY_UNKNOWN = "NotReady", "Ready Unknown"
# the step gpuboot records in a node's actions annotation when it takes the node out
TAKE_OUT_STEP = "take-out"

FLAGS = {
    "max_unavailable": "--max-unavailable",
    "per_domain": "--max-unavailable-per-domain",
    "domain_label": "--domain-label",
    "pool_label": "--pool-label",
    "max_new": "--max-new-takeouts",
    "window_s": "--takeout-window",
    "ignore_taints": "--ignore-taint",
}
_AMOUNT = re.compile(r"^(?:(\d+)|(\d+(?:\.\d+)?)%)$")
# a label (or taint) key: an optional DNS-subdomain prefix and "/", then a name of at most
# 63 characters, alphanumeric at both ends
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^(?:[a-z0-9](?:[a-z0-9.-]{{0,251}}[a-z0-9])?/)?{_NAME}$")


def _bad(name: str, value: object, rule: str, example: str) -> BadInput:
    flag = FLAGS[name]
    return BadInput(f"{value!r} {rule}", where=flag, hint=f"e.g. {flag} {example}")


def _check_amount(name: str, spec: str, example: str) -> None:
    match = _AMOUNT.match(str(spec).strip())
    ok = match and (int(match[1]) >= 1 if match[1] else 0 < Fraction(match[2]) <= 100)
    if not ok:
        raise _bad(name, spec, "is not a node count (>= 1) or a percentage (0-100%]", example)


def amount(spec: str, total: int) -> int:
    """``"3"`` or ``"10%"`` of ``total`` nodes: a percentage rounds down, and is at least 1."""
    text = spec.strip()
    if text.endswith("%"):
        return max(1, int(Fraction(text[:-1]) * total / 100))
    return int(text)


@dataclass(frozen=True)
class Limits:
    max_unavailable: str = "10%"  # of all nodes in the pool; at least 1
    per_domain: int | None = None  # default 1 when domain_label is set
    domain_label: str | None = None  # e.g. nvidia.com/gpu.clique or topology.kubernetes.io/rack
    pool_label: str | None = None  # nodes are pooled by this label's value (None: one pool)
    max_new: str = "5%"  # new gpuboot take-outs per window; at least 1
    window_s: int = 600
    ignore_taints: tuple[str, ...] = DEDICATED_TAINTS  # dedicate a node, do not take it out

    def __post_init__(self) -> None:
        """Bad limits are bad input (exit 2), found before any host is touched."""
        _check_amount("max_unavailable", self.max_unavailable, "10% or --max-unavailable 2")
        _check_amount("max_new", self.max_new, "5% or --max-new-takeouts 2")
        if isinstance(self.window_s, bool) or not isinstance(self.window_s, int):
            raise _bad("window_s", self.window_s, "is not a whole number of seconds", "600")
        if self.window_s < 1:
            raise _bad("window_s", self.window_s, "must be at least 1 second", "600")
        for name in ("domain_label", "pool_label"):
            key = getattr(self, name)
            if key is not None and not _KEY.match(key):
                raise _bad(
                    name, key, "is not a Kubernetes label key", "topology.kubernetes.io/rack"
                )
        for key in self.ignore_taints:
            if not _KEY.match(key):
                raise _bad("ignore_taints", key, "is not a taint key", "dedicated")
        if self.per_domain is not None:
            if isinstance(self.per_domain, bool) or not isinstance(self.per_domain, int):
                raise _bad("per_domain", self.per_domain, "is not a whole number", "1")
            if self.per_domain < 1:
                raise _bad("per_domain", self.per_domain, "must be at least 1", "1")
            if self.domain_label is None:
                raise BadInput(
                    "limits nodes per failure domain, but no domain label says which "
                    "domain a node is in",
                    where="--max-unavailable-per-domain",
                    hint="add --domain-label KEY, e.g. --domain-label nvidia.com/gpu.clique",
                )

    @property
    def domain_cap(self) -> int | None:
        if self.domain_label is None:
            return None
        return self.per_domain or 1


def _meta(node: dict[str, Any]) -> dict[str, Any]:
    return node.get("metadata") or {}


def name_of(node: dict[str, Any]) -> str:
    return str(_meta(node).get("name") or "")


def _ready(node: dict[str, Any]) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status")
    return None  # not reported (yet): nothing says it is out


def cause(node: dict[str, Any], ignore_taints: tuple[str, ...] = DEDICATED_TAINTS) -> str | None:
    """Why ``node`` is unavailable to new pods, in a word or two; None when it is not."""
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("effect") in OUT_EFFECTS]
    keys = [t.get("key") for t in taints]
    ours = _meta(node).get("annotations", {}) or {}
    if L.TAINT_KEY in keys or (
        spec.get("unschedulable") and ours.get(L.ANNOTATION_CORDONED_BY) == L.CORDONED_BY_US
    ):
        return CAUSE_GPUBOOT
    if spec.get("unschedulable") or CORDON_TAINT in keys:
        return CAUSE_CORDON
    ready = _ready(node)
    if ready == "False" or (ready != "Unknown" and any(k in NOT_READY_TAINTS for k in keys)):
        return CAUSE_NOT_READY
    if ready == "Unknown":
        return CAUSE_READY_UNKNOWN
    for key in keys:
        if key not in ignore_taints:
            return f"taint {key}"
    return None


def taken_out_at(node: dict[str, Any]) -> float | None:
    """When gpuboot took ``node`` out (its annotation), or None (never, or unreadable:
    a mangled mark cannot say when, so it counts in no window)."""
    raw = (_meta(node).get("annotations") or {}).get(L.ANNOTATION_TAKEN_OUT_AT)
    try:
        return float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def take_out_times(node: dict[str, Any]) -> list[float]:
    """Every time gpuboot took ``node`` out that the node still records: its taken-out-at,
    and the take-outs in its actions annotation, which outlive a release (a node taken out
    and let back in, or put back by a human, still counts in its window). An unreadable
    annotation reads as none."""
    times = [at] if (at := taken_out_at(node)) is not None else []
    try:
        actions = json.loads(
            (_meta(node).get("annotations") or {}).get(L.ANNOTATION_ACTIONS) or "[]"
        )
    except ValueError:
        actions = []
    for entry in actions if isinstance(actions, list) else []:
        at = entry.get("at") if isinstance(entry, dict) else None
        if entry.get("step") == TAKE_OUT_STEP and isinstance(at, int | float):
            times.append(float(at))
    return times


@dataclass
class Census:
    unavailable: dict[str, str]  # node -> cause
    recent_takeouts: list[tuple[str, float]]  # (node, taken_out_at), in the window


def census(
    nodes: list[dict[str, Any]],
    *,
    now: float,
    window_s: int,
    ignore_taints: tuple[str, ...] = DEDICATED_TAINTS,
) -> Census:
    """Who is out and why, and gpuboot's take-outs since ``now - window_s`` (one in the
    future, a clock ahead of ours, counts: the window errs towards fewer take-outs)."""
    out: dict[str, str] = {}
    recent: list[tuple[str, float]] = []
    for node in nodes:
        name = name_of(node)
        if why := cause(node, ignore_taints):
            out[name] = why
        if inside := [at for at in take_out_times(node) if at > now - window_s]:
            recent.append((name, max(inside)))  # a node counts once in a window
    return Census(out, sorted(recent, key=lambda r: r[1]))


def read_census(api: Api, *, now: float, window_s: int) -> Census:
    return census(list_nodes(api), now=now, window_s=window_s)


@dataclass
class _Pool:
    key: str  # "" without a pool label
    nodes: set[str] = field(default_factory=set)


class DisruptionGate:
    """One run's admissions, counted from one node list: every node admitted is out from
    then on, for the next admission of the same run."""

    def __init__(self, nodes: list[dict[str, Any]], limits: Limits, *, now: float) -> None:
        self.limits = limits
        self.now = now
        seen = census(nodes, now=now, window_s=limits.window_s, ignore_taints=limits.ignore_taints)
        self.unavailable = dict(seen.unavailable)
        self.takeouts = list(seen.recent_takeouts)
        self._labels = {name_of(n): _meta(n).get("labels") or {} for n in nodes}
        self._pool_size = Counter(self._pool(name) for name in self._labels)

    def knows(self, node: str) -> bool:
        return node in self._labels

    def is_out(self, node: str) -> bool:
        return node in self.unavailable

    def _pool(self, node: str) -> str:
        key = self.limits.pool_label
        return str(self._labels.get(node, {}).get(key, "")) if key else ""

    def _domain(self, node: str) -> str | None:
        key = self.limits.domain_label
        value = self._labels.get(node, {}).get(key) if key else None
        return None if value is None else str(value)

    def _where(self, pool: str) -> str:
        key = self.limits.pool_label
        return f" of pool {key}={pool or '<none>'}" if key else ""

    def admit(self, node: str) -> str | None:
        """None: ``node`` may be taken out (and counts as out from now on); else why it is
        held back. A node already out needs no admission."""
        if node in self.unavailable:
            return None
        if node not in self._labels:
            return f"held back: {node} is not in the node list read at the start of this run"
        limits, pool = self.limits, self._pool(node)
        size = self._pool_size[pool]
        members = [n for n in self.unavailable if self._pool(n) == pool]
        cap = amount(limits.max_unavailable, size)
        if len(members) + 1 > cap:
            return (
                f"held back: {len(members)} of {size} nodes{self._where(pool)} unavailable, "
                f"--max-unavailable {limits.max_unavailable}"
            )
        domain = self._domain(node)
        if limits.domain_cap is not None and domain is not None:
            # a domain is physical (a rack, an NVLink clique): counted across pools
            peers = [n for n in self._labels if self._domain(n) == domain]
            out = [n for n in peers if n in self.unavailable]
            if len(out) + 1 > limits.domain_cap:
                return (
                    f"held back: {len(out)} of {len(peers)} nodes of domain "
                    f"{limits.domain_label}={domain} unavailable, "
                    f"--max-unavailable-per-domain {limits.domain_cap}"
                )
        # a node counts once in the window: taking it out again is the same incident
        recent = {n for n, _at in self.takeouts if self._pool(n) == pool and n != node}
        if len(recent) + 1 > amount(limits.max_new, size):
            return (
                f"held back: gpuboot took out {len(recent)} of {size} nodes{self._where(pool)} "
                f"in the last {limits.window_s} s, --max-new-takeouts {limits.max_new} per "
                f"--takeout-window {limits.window_s}"
            )
        self.unavailable[node] = CAUSE_GPUBOOT
        self.takeouts.append((node, self.now))
        return None


_XID_79 = re.compile(r"\bXid 79\b")
_LOST_GPU = re.compile(r"\bGPU \S+ lost\b")


def critical(node: NodeReport) -> str | None:
    """The fault that cannot wait, in words: a GPU fallen off the bus (Xid 79, or a GPU the
    driver lost). Such a node goes first and is taken out even during a cancel's cool-down."""
    for finding in node.findings:
        if finding.status != Status.FAIL:
            continue
        if _XID_79.search(finding.reason):
            return f"{finding.rule}: Xid 79 (GPU fallen off the bus)"
        if _LOST_GPU.search(finding.reason):
            return f"{finding.rule}: a GPU is lost"
    return None


def _rank(node: NodeReport) -> int:
    if node.verdict == Status.FAIL:
        return 0 if critical(node) else 1
    return {Status.ERROR: 2, Status.WARN: 3}.get(node.verdict, 4)


def severity_order(reports: list[NodeReport]) -> list[NodeReport]:
    """Worst first, so the budget goes to them: FAIL with a lost GPU / Xid 79, FAIL, ERROR,
    WARN, the rest; report order within each."""
    return sorted(reports, key=_rank)
