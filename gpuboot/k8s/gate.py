"""The Kubernetes join gate: after certify, only certified nodes lose the uncertified taint;
after a scan, failing nodes are taken out, within the disruption budget.

One LIST of the nodes first: the disruption gate (gpuboot.k8s.budget) counts from it, and
nodes are judged worst first, so the budget goes to the worst. Per node: the ownership
checks (another remediator's marker or the opt-out label: no action; a human undid
gpuboot's take-out: gpuboot's marks removed and a cool-down), then GET the Node, work out
the patch (gpuboot.k8s.patch), PATCH it as a strategic merge patch guarded by the
resourceVersion just read, then write its conditions through the status subresource.
A node's own failure (absent, 409 conflict, forbidden) is recorded on its action and never
stops the others; the API server failing (5xx, unreachable) stops every further action:
fail static, nothing decided from a stale read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.k8s.budget import TAKE_OUT_STEP, DisruptionGate, Limits, critical, severity_order
from gpuboot.k8s.client import TIMEOUT, Api, connect, describe, list_nodes, read_node, server_failed
from gpuboot.k8s.conditions import write_conditions
from gpuboot.k8s.decision import Target, decide
from gpuboot.k8s.ownership import cancelled, foreign_marker
from gpuboot.k8s.patch import append_action, plan
from gpuboot.results import NodeReport, RunReport

__all__ = ["TIMEOUT", "Api", "GateAction", "apply_gate", "apply_target", "connect", "describe"]

DEFAULT_COOLDOWN_S = 3600  # after a human cancels a take-out, gpuboot leaves the node alone


@dataclass
class GateAction:
    node: str  # the Kubernetes node name
    verdict: str
    changes: list[str] = field(default_factory=list)  # made, or that would be (dry run)
    error: str | None = None
    host: str | None = None  # the inventory host, when it differs from ``node``
    missing: bool = False  # the cluster has no such node
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    held: str | None = None  # failing, but not taken out: why (budget, breaker, cool-down)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def apply_target(
    api: Api,
    action: GateAction,
    target: Target,
    dry_run: bool,
    *,
    now: datetime | None = None,
) -> bool:
    """Read the node, patch it towards ``target``, then write its conditions; the outcome
    lands on ``action`` (shared by the gate, install's drain and remediation). True when
    the API server itself failed (5xx, unreachable): the caller takes no further action.
    A node another remediator owns (or opted out) is left alone: ``action.held`` says why."""
    at = now or datetime.now(UTC)
    try:
        node = read_node(api, action.node)
    except api.api_error as exc:
        if getattr(exc, "status", None) == 404:
            action.missing = True
            action.error = "no such node in the cluster"
            return False
        action.error = describe(exc, api)
        return server_failed(exc, api)
    except (*api.transport_errors, ValueError) as exc:  # ValueError: not JSON
        action.error = describe(exc, api)
        return True
    if marker := foreign_marker(node):
        action.held = f"left alone: {marker}"
        return False
    if target.leave:
        action.notes.append(target.leave)
    else:
        todo = plan(node, target, now=at.timestamp())
        action.notes += todo.notes
        if todo.body is not None:
            if not todo.body["metadata"].get("resourceVersion"):
                action.error = (
                    "the API server returned the node without a resourceVersion: not patched"
                )
                return False
            try:
                # a dict body goes as application/strategic-merge-patch+json (kubectl's patch
                # type), the client's default in 30 and 37 alike; not every version takes
                # _content_type
                api.core.patch_node(
                    action.node,
                    todo.body,
                    field_manager=L.FIELD_MANAGER,
                    _preload_content=False,
                    _request_timeout=TIMEOUT,
                    **({"dry_run": "All"} if dry_run else {}),
                )
            except (api.api_error, *api.transport_errors) as exc:
                action.error = describe(exc, api)
                return server_failed(exc, api)
            action.changes += todo.changes
    try:
        action.changes += write_conditions(
            api, action.node, target.conditions, now=at, dry_run=dry_run
        )
    except (api.api_error, *api.transport_errors, ValueError) as exc:
        action.error = f"node conditions not written: {describe(exc, api)}"
        return server_failed(exc, api)
    return False


def _takes_out(target: Target) -> bool:
    """The target adds gpuboot's taint (or cordon) where it is not yet."""
    return not (target.certified or target.error or target.leave or target.held)


def _cancelled_at(node: dict[str, Any]) -> float | None:
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(L.ANNOTATION_CANCELLED_AT)
    try:
        return float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def _stamp(unix: float) -> str:
    return f"{datetime.fromtimestamp(unix, UTC):%Y-%m-%dT%H:%M:%SZ}"


def _release_markers(target: Target, now: float) -> Target:
    """A human undid gpuboot's take-out: every mark of gpuboot's goes (its taint, its
    cordon, the take-out annotations, the state), the verdict's facts stay (labels,
    conditions), and the cancel's time starts the cool-down."""
    return Target(
        host=target.host,
        verdict=target.verdict,
        certified=True,  # gpuboot's taint must be absent
        labels=target.labels,
        annotations={L.ANNOTATION_CANCELLED_AT: str(int(now))},
        cordon="uncordon-ours",
        state=None,
        conditions=target.conditions,
    )


def _ownership(
    target: Target,
    report: NodeReport,
    live: dict[str, Any],
    action: GateAction,
    *,
    now: float,
    cooldown_s: int,
) -> Target | None:
    """``target`` as ownership allows it for the node as listed: None when gpuboot takes
    no action on the node at all (``action`` says why)."""
    labels = (live.get("metadata") or {}).get("labels") or {}
    if marker := foreign_marker(live):
        action.held = f"left alone: {marker}"
        return None
    if labels.get(L.LABEL_ACTION) == L.QUARANTINE_RMA:
        action.held = (
            f"quarantined ({L.LABEL_ACTION}={L.QUARANTINE_RMA}): no automatic action; "
            f"`gpuboot node release {action.node} --reason TEXT` brings it back"
        )
        return None
    urgent = critical(report)
    if (undone := cancelled(live)) and _takes_out(target):
        if urgent:
            action.notes.append(f"{undone}, but the fault is critical ({urgent}): taken out again")
            return target
        action.notes.append(
            f"{undone}: gpuboot's marks removed; no take-out before "
            f"{_stamp(now + cooldown_s)} (--cooldown {cooldown_s}) unless the fault is critical"
        )
        return _release_markers(target, now)
    since = _cancelled_at(live)
    if since is None:
        return target
    if since + cooldown_s > now and _takes_out(target) and not urgent:
        target.leave = action.held = (
            f"held back: a human cancelled gpuboot's take-out at {_stamp(since)}; cool-down "
            f"until {_stamp(since + cooldown_s)} (--cooldown {cooldown_s})"
        )
        return target
    if since + cooldown_s <= now or target.certified:
        target.annotations[L.ANNOTATION_CANCELLED_AT] = None  # the cool-down is over
    return target


def record_take_out(target: Target, node: dict[str, Any], *, now: float) -> None:
    """The take-out goes in the node's bounded actions annotation: the disruption window
    still counts it after the node is released."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    why = next((m for s, _r, m in target.conditions.values() if s == "False" and m), "")
    target.annotations[L.ANNOTATION_ACTIONS] = append_action(
        annotations, TAKE_OUT_STEP, why or target.verdict, now
    )


def _stopped(action: GateAction, why: str) -> GateAction:
    action.error = f"not gated: {why}; nothing changed on this node, run the gate again"
    return action


def apply_gate(
    report: RunReport,
    *,
    certificates: Mapping[str, str | Path] | None = None,
    kubeconfig: str | None,
    context: str | None = None,
    node_names: dict[str, str] | None = None,
    dry_run: bool = False,
    allow_warn: bool = False,
    now: datetime | None = None,
    accept_partial: Mapping[str, tuple[str, ...]] | None = None,
    hold: Mapping[str, str] | None = None,
    limits: Limits | None = None,
    cooldown_s: int = DEFAULT_COOLDOWN_S,
) -> list[GateAction]:
    """Gate every node of a certify (or scan) report; one action per node, in report order.
    ``certificates``: host -> the certificate issued for it (gpuboot.report.write_reports).

    PASS (WARN with ``allow_warn``) with a valid certificate: uncertified taint removed,
    certified/stack/cert labels set, uncordoned if gpuboot had cordoned it. FAIL (WARN
    without ``allow_warn``): taken out with gpuboot's taint, ``certified=false`` and the
    failed rule ids, if the disruption gate admits it (``limits``), else flagged
    noncompliant and held back (``action.held``); so is a node ``hold`` names (host ->
    why: the breaker). ERROR only: left as it is, conditions Unknown. ``dry_run`` sends
    the same PATCHes with ``dryRun=All``: validated by the API server (conflicts
    included), stored by nobody. A partial certificate (its run proved less than the SKU
    requires) lifts no taint unless ``accept_partial`` (host -> its gpuboot_accept_partial)
    names the scope of every gap.

    Every decision is made from one node list before the first write, worst verdict first
    (the budget goes to the worst); the writes follow in report order.
    """
    api = connect(kubeconfig, context)
    at = now or datetime.now(UTC)
    unix = at.timestamp()
    names = node_names or {}
    issued = certificates or {}
    held_by = hold or {}
    actions: dict[str, GateAction] = {}
    decided: dict[str, Target] = {}
    for node in report.nodes:
        name = names.get(node.host, node.host)
        target = decide(
            node,
            bundle=report.bundle,
            certificate=issued.get(node.host),
            allow_warn=allow_warn,
            now=at,
            accepts=(accept_partial or {}).get(node.host, ()),
        )
        actions[node.host] = GateAction(
            node=name,
            verdict=target.verdict,
            host=node.host if name != node.host else None,
            dry_run=dry_run,
            error=target.error,
        )
        if not target.error:
            decided[node.host] = target
    if not decided:
        return list(actions.values())  # nothing to do on the cluster: not even a read
    try:
        listed = list_nodes(api)
    except (api.api_error, *api.transport_errors, ValueError) as exc:
        why = f"cannot list the nodes ({describe(exc, api)})"
        return [_stopped(a, why) if h in decided else a for h, a in actions.items()]
    live = {str((n.get("metadata") or {}).get("name")): n for n in listed}
    budget = DisruptionGate(listed, limits or Limits(), now=unix)
    targets: dict[str, Target] = {}
    for node in severity_order([n for n in report.nodes if n.host in decided]):
        action, target = actions[node.host], decided[node.host]
        if action.node not in live:
            action.missing, action.error = True, "no such node in the cluster"
            continue
        owned = _ownership(target, node, live[action.node], action, now=unix, cooldown_s=cooldown_s)
        if owned is None:
            continue
        if _takes_out(owned) and not budget.is_out(action.node):
            # the breaker's hold first: a held node must not use up the budget
            owned.held = action.held = held_by.get(node.host) or budget.admit(action.node)
            if not owned.held:
                record_take_out(owned, live[action.node], now=unix)
        targets[node.host] = owned
    stopped = None
    for host, action in actions.items():
        if host not in targets:
            continue
        if stopped:
            _stopped(action, f"the API server failed earlier in this run ({stopped})")
        elif apply_target(api, action, targets[host], dry_run, now=at):
            stopped = action.error
    return list(actions.values())
