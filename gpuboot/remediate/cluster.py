"""What remediation writes on a cluster Node and asks of the disruption gate: the gate's
admission, the step marks (state label, bounded actions annotation) and the quarantine.

Every write is a strategic merge patch guarded by the resourceVersion just read, so a
node that changed meanwhile (a human uncordon) is read again rather than overwritten."""

from __future__ import annotations

import time
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.k8s.client import TIMEOUT, Api, list_nodes, read_node
from gpuboot.k8s.patch import append_action


def meta(node: dict[str, Any], part: str) -> dict[str, str]:
    return (node.get("metadata") or {}).get(part) or {}


def ours_taint(taint: dict[str, Any]) -> bool:
    return taint.get("key") == L.TAINT_KEY


def patch(
    api: Api,
    node: dict[str, Any],
    *,
    labels: dict[str, str | None] | None = None,
    annotations: dict[str, str | None] | None = None,
    spec: dict[str, Any] | None = None,
) -> None:
    """Set (or with None remove) labels and annotations, and spec fields, on ``node`` as read."""
    body: dict[str, Any] = {
        "metadata": {
            "resourceVersion": (node.get("metadata") or {}).get("resourceVersion"),
            **({"labels": labels} if labels else {}),
            **({"annotations": annotations} if annotations else {}),
        }
    }
    if spec:
        body["spec"] = spec
    send(api, node["metadata"]["name"], body)


def send(api: Api, name: str, body: dict[str, Any] | None) -> None:
    """Send a strategic merge patch of the node, if there is one (None: nothing to do)."""
    if body is not None:
        api.core.patch_node(
            name,
            body,
            field_manager=L.FIELD_MANAGER,
            _preload_content=False,
            _request_timeout=TIMEOUT,
        )


def admit(api: Api, name: str, limits: Any) -> str | None:
    """The disruption gate's word on one more take-out of ``name`` (None: admitted)."""
    from gpuboot.k8s.budget import DisruptionGate, Limits

    return DisruptionGate(list_nodes(api), limits or Limits(), now=time.time()).admit(name)


def mark(api: Api, name: str, step: str, result: str, reason: str) -> None:
    """Record a step on the node: the bounded actions annotation, the state label
    (remediating while it climbs, removed once it passed) and the one-line reason."""
    node, now = read_node(api, name), time.time()
    state = None if result == "passed" else L.STATE_REMEDIATING
    patch(
        api,
        node,
        labels={L.LABEL_STATE: state},
        annotations={
            L.ANNOTATION_ACTIONS: append_action(meta(node, "annotations"), step, result, now),
            L.ANNOTATION_REASON: None if state is None else reason[: L.MAX_REASON],
        },
    )


def quarantine(api: Api, name: str, reason: str, *, take_out: bool) -> list[str]:
    """Label the node for hardware work; with ``take_out`` (the gate admitted it) it also
    gets gpuboot's taint if it has not got it. What changed, in words."""
    node, now = read_node(api, name), time.time()
    changes = [f"{L.LABEL_STATE}={L.STATE_QUARANTINED}", f"{L.LABEL_ACTION}={L.QUARANTINE_RMA}"]
    annotations = {
        L.ANNOTATION_ACTIONS: append_action(meta(node, "annotations"), "quarantine", "done", now),
        L.ANNOTATION_REASON: reason[: L.MAX_REASON],
    }
    spec = None
    taints = list((node.get("spec") or {}).get("taints") or [])
    if take_out and not any(ours_taint(t) for t in taints):
        taint = {"key": L.TAINT_KEY, "value": L.TAINT_VALUE, "effect": L.TAINT_EFFECT}
        spec = {"taints": [*taints, taint]}
        annotations[L.ANNOTATION_TAKEN_OUT_AT] = str(int(now))
        changes.append(f"taint {L.TAINT_KEY}")
    patch(
        api,
        node,
        labels={L.LABEL_STATE: L.STATE_QUARANTINED, L.LABEL_ACTION: L.QUARANTINE_RMA},
        annotations=annotations,
        spec=spec,
    )
    return changes
