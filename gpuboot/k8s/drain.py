"""Before install changes a cluster member's GPU stack: cordon it and drain it.

What `kubectl drain --ignore-daemonsets` does, through the API: the node is cordoned
(marked as gpuboot's cordon, so certify's gate lifts it once the node certifies again),
gets the uncertified taint and ``certified=false`` (its certificate described the old
stack), then every pod on it is evicted through the Eviction API, so PodDisruptionBudgets
are honoured (a refused eviction, 429, is retried until the timeout). DaemonSet pods and
mirror (static) pods stay, as do pods that already finished. A node the cluster does not
know is left alone; a node that cannot be drained in time is reported and not installed.

Every node goes through the disruption gate (gpuboot.k8s.budget) before it is cordoned,
counted from one node list read first: a rolling install, a scan and another tool's cordon
count against the same limits. A node the gate holds back is not cordoned, not drained and
not installed this run (its ``held`` says why); neither is a node another remediator owns.
The API server failing (5xx, unreachable) while nodes are cordoned stops the cordons: the
rest are not touched.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.k8s.budget import DisruptionGate, Limits
from gpuboot.k8s.client import TIMEOUT, Api, connect, describe, list_nodes
from gpuboot.k8s.decision import Target
from gpuboot.k8s.gate import GateAction, apply_target, record_take_out
from gpuboot.k8s.ownership import foreign_marker

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass
class DrainResult:
    host: str
    node: str  # the Kubernetes node name
    member: bool = True  # False: the cluster has no such node (nothing to drain)
    changes: list[str] = field(default_factory=list)  # what the cordon patch changed
    evicted: list[str] = field(default_factory=list)  # namespace/name
    error: str | None = None
    held: str | None = None  # not cordoned, not installed this run: why (budget, ownership)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _uncertify(host: str) -> Target:
    return Target(
        host=host,
        verdict="INSTALL",
        certified=False,
        # the certificate and stack labels described the stack about to be replaced
        labels={
            L.LABEL_CERTIFIED: "false",
            L.LABEL_STACK: None,
            L.LABEL_CERT_SHA: None,
            L.LABEL_CERT_EXPIRY: None,
        },
        cordon="cordon",
        drain=True,
    )


def _evictable(pod: dict[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False  # a static pod: the kubelet owns it, eviction cannot remove it
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return False  # its controller ignores the cordon and would recreate it at once
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _pods(api: Api, node: str) -> list[dict[str, Any]]:
    resp = api.core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node}",
        _preload_content=False,
        _request_timeout=TIMEOUT,
    )
    return [p for p in json.loads(resp.data).get("items") or [] if _evictable(p)]


def _evict(api: Api, pod: dict[str, Any]) -> str | None:
    """Ask for the pod's eviction; None when accepted (or the pod is gone), else why not."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    try:
        api.core.create_namespaced_pod_eviction(
            meta["name"],
            meta["namespace"],
            body,
            _preload_content=False,
            _request_timeout=TIMEOUT,
        )
    except api.api_error as exc:
        status = getattr(exc, "status", None)
        if status == 404:
            return None
        if status == 429:
            return "eviction refused by a PodDisruptionBudget (429)"
        return describe(exc, api)
    return None


def drain(
    hosts: list[str],
    *,
    kubeconfig: str | None,
    context: str | None = None,
    node_names: dict[str, str] | None = None,
    timeout_s: float = 600,
    poll_s: float = 2,
    limits: Limits | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], float] = time.time,
) -> dict[str, DrainResult]:
    """Cordon and drain the cluster nodes of ``hosts``; one result per host.

    All admitted nodes are cordoned first, then evicted together, so a batch drains in
    the time of its slowest node. A node whose pods are still there after ``timeout_s``
    gets an error naming them (it stays cordoned, as kubectl leaves it).
    """
    api = connect(kubeconfig, context)
    names = node_names or {}
    results = {h: DrainResult(host=h, node=names.get(h, h)) for h in hosts}
    try:
        listed = list_nodes(api)
    except (api.api_error, *api.transport_errors, ValueError) as exc:
        for result in results.values():
            result.error = f"not cordoned: cannot list the nodes ({describe(exc, api)})"
        return results
    known = {(n.get("metadata") or {}).get("name"): n for n in listed}
    budget = DisruptionGate(listed, limits or Limits(), now=wall())
    stopped = None
    for result in results.values():
        if result.node not in known:
            result.member = False
            continue
        if stopped:
            result.error = f"not cordoned: the API server failed earlier in this run ({stopped})"
            continue
        if marker := foreign_marker(known[result.node]):
            result.held = f"left alone: {marker}"  # and no place in the budget taken
            continue
        out = budget.is_out(result.node)
        if why := budget.admit(result.node):
            result.held = why
            continue
        target = _uncertify(result.host)
        if not out:
            record_take_out(target, known[result.node], now=budget.now)
        action = GateAction(node=result.node, verdict="INSTALL")
        if apply_target(api, action, target, dry_run=False):
            stopped = action.error
        result.member, result.changes = not action.missing, action.changes
        result.held = action.held
        if action.error and not action.missing:
            result.error = f"not cordoned: {action.error}"
    deadline = clock() + timeout_s
    waiting = {h: r for h, r in results.items() if r.member and not r.error and not r.held}
    refused: dict[str, dict[str, str]] = {h: {} for h in waiting}  # pod -> why not evicted
    remaining: dict[str, list[str]] = {}
    while waiting:
        for host, result in list(waiting.items()):
            try:
                pods = _pods(api, result.node)
            except (api.api_error, *api.transport_errors, ValueError) as exc:
                result.error = f"cannot list its pods: {describe(exc, api)}"
                del waiting[host]
                continue
            if not pods:
                del waiting[host]
                continue
            remaining[host] = []
            for pod in pods:
                ref = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
                remaining[host].append(ref)
                if ref in result.evicted:
                    continue  # accepted, terminating
                why = _evict(api, pod)
                if why is None:
                    result.evicted.append(ref)
                    refused[host].pop(ref, None)
                else:
                    refused[host][ref] = why
        if waiting and clock() >= deadline:
            for host, result in waiting.items():
                left = [
                    f"{ref} ({refused[host][ref]})" if ref in refused[host] else ref
                    for ref in remaining[host]
                ]
                result.error = f"drain timed out after {timeout_s:.0f} s; still on the node: " + (
                    ", ".join(left)
                )
            break
        if waiting:
            sleep(poll_s)
    return results
