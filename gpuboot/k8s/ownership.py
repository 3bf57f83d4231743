"""Who else acts on a node, and whether a human undid gpuboot's take-out. Pure, no I/O.

gpuboot never fights another remediator: a node carrying another tool's marker, or the
operator's opt-out, is left alone. The marker keys are the other tools' own, each with
where it is defined. While gpuboot maintains a node it asks NVSentinel to stand aside
through NVSentinel's documented opt-out label, and gives the previous value back after.
"""

from __future__ import annotations

import json
from typing import Any

from gpuboot.k8s import labels as L

# NVSentinel's node state label, present (any value) from quarantine through drain to
# remediation, and left on a failed drain or remediation: NVSentinel owns the node.
# github.com/NVIDIA/NVSentinel commons/pkg/statemanager/statemanager.go (NVSentinelStateLabelKey)
NVSENTINEL_STATE = "dgxc.nvidia.com/nvsentinel-state"
# The taint NVSentinel's janitor puts on a node it hands to an external remediator.
# github.com/NVIDIA/NVSentinel tests/external_remediation_test.go (releaseTaintKey)
NVSENTINEL_EXTERNAL_REMEDIATION = "nvsentinel.dgxc.nvidia.com/external-remediation"
# NVSentinel's opt-out: "false" and it ignores the node's health events (no quarantine,
# drain or remediation). github.com/NVIDIA/NVSentinel docs/cancelling-breakfix.md
NVSENTINEL_MANAGED = "k8saas.nvidia.com/ManagedByNVSentinel"
# Skyhook (renamed NodeWright) records each cordon it makes as an annotation
# cordon_<name>; the node stays cordoned while any remains. github.com/NVIDIA/skyhook
# docs/architecture/interrupt-flow.md ("Shared Cordon Ownership"), docs/nodewright-migration.md
SKYHOOK_CORDON_PREFIXES = ("skyhook.nvidia.com/cordon_", "nodewright.nvidia.com/cordon_")
# Kubernetes' own: the operator declared the node out of service (non-graceful shutdown).
# https://kubernetes.io/docs/reference/labels-annotations-taints/#node-kubernetes-io-out-of-service
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"

# What NVSentinel's opt-out label was before gpuboot set it, as JSON (null: absent), so
# the value given back is exactly the operator's
ANNOTATION_NVSENTINEL_WAS = L.PREFIX + "nvsentinel-managed-was"


def _meta(node: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    meta = node.get("metadata") or {}
    return meta.get("labels") or {}, meta.get("annotations") or {}


def _taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def foreign_marker(node: dict[str, Any]) -> str | None:
    """Why gpuboot takes no action on the node (another tool owns it, or the operator
    opted it out), in words naming the marker; None when the node is free."""
    labels, annotations = _meta(node)
    if labels.get(L.LABEL_MANAGED) == "false":
        return f"opted out of gpuboot: label {L.LABEL_MANAGED}=false"
    if NVSENTINEL_STATE in labels:
        return f"NVSentinel is handling it: label {NVSENTINEL_STATE}={labels[NVSENTINEL_STATE]}"
    for taint in _taints(node):
        if taint.get("key") == NVSENTINEL_EXTERNAL_REMEDIATION:
            return (
                "NVSentinel handed it to an external remediator: "
                f"taint {NVSENTINEL_EXTERNAL_REMEDIATION}={taint.get('value', '')}"
            )
        if taint.get("key") == OUT_OF_SERVICE:
            return f"declared out of service: taint {OUT_OF_SERVICE}"
    for key in sorted(annotations):
        if key.startswith(SKYHOOK_CORDON_PREFIXES):
            owner = key.split("/cordon_", 1)[1]
            return f"cordoned by Skyhook/NodeWright {owner!r} for its update: annotation {key}"
    return None


def cancelled(node: dict[str, Any]) -> str | None:
    """A human undid gpuboot's take-out: uncordoned the node gpuboot had cordoned, or
    removed gpuboot's taint from a node gpuboot took out. The words, or None. Someone
    else's cordon, lifted or not, is never gpuboot's to count."""
    _labels, annotations = _meta(node)
    cordoned_by_us = annotations.get(L.ANNOTATION_CORDONED_BY) == L.CORDONED_BY_US
    if cordoned_by_us and not (node.get("spec") or {}).get("unschedulable"):
        return "a human uncordoned the node gpuboot had cordoned"
    # a take-out is gpuboot's taint or its cordon: with neither left, someone removed it
    # (while gpuboot's cordon stands the node is still out, whatever became of the taint)
    ours_tainted = any(t.get("key") == L.TAINT_KEY for t in _taints(node))
    if L.ANNOTATION_TAKEN_OUT_AT in annotations and not cordoned_by_us and not ours_tainted:
        return f"a human removed gpuboot's taint {L.TAINT_KEY} from the node gpuboot took out"
    return None


def pause_nvsentinel(node: dict[str, Any]) -> dict[str, Any] | None:
    """The patch that asks NVSentinel to stand aside while gpuboot maintains the node
    (its opt-out label "false", the value before kept in an annotation), guarded by the
    node's resourceVersion; None when gpuboot already did."""
    labels, annotations = _meta(node)
    if ANNOTATION_NVSENTINEL_WAS in annotations:
        return None  # paused already: the value kept is the operator's, not our "false"
    return {
        "metadata": {
            "resourceVersion": (node.get("metadata") or {}).get("resourceVersion"),
            "labels": {NVSENTINEL_MANAGED: "false"},
            "annotations": {ANNOTATION_NVSENTINEL_WAS: json.dumps(labels.get(NVSENTINEL_MANAGED))},
        }
    }


def resume_nvsentinel(node: dict[str, Any]) -> dict[str, Any] | None:
    """The patch that gives NVSentinel's opt-out label its value from before gpuboot's
    pause (removed if there was none), guarded by the node's resourceVersion; None when
    gpuboot did not pause it. A label someone changed since gpuboot set it stays theirs."""
    labels, annotations = _meta(node)
    if ANNOTATION_NVSENTINEL_WAS not in annotations:
        return None
    try:
        before = json.loads(annotations[ANNOTATION_NVSENTINEL_WAS])
    except ValueError:
        before = None  # unreadable: what gpuboot added goes, nothing is invented
    meta: dict[str, Any] = {
        "resourceVersion": (node.get("metadata") or {}).get("resourceVersion"),
        "annotations": {ANNOTATION_NVSENTINEL_WAS: None},
    }
    if labels.get(NVSENTINEL_MANAGED) == "false":
        meta["labels"] = {NVSENTINEL_MANAGED: before if isinstance(before, str) else None}
    return {"metadata": meta}
