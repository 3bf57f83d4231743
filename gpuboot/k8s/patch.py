"""From a node as the API server returned it and the gate's target: the strategic-merge
patch to send and the changes it makes, in words. Pure, no I/O.

``spec.taints`` has no merge key in the Node schema, so any patch replaces the whole
list: the patch carries the node's current list minus (or plus) the uncertified taint,
every other taint byte-for-byte as read, and ``metadata.resourceVersion`` so the API
server refuses it (409) if anything changed the node since it was read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.k8s.decision import Target


@dataclass
class Plan:
    body: dict[str, Any] | None  # None: the node already is as wanted
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _is_ours(taint: dict[str, Any]) -> bool:
    return taint.get("key") == L.TAINT_KEY and taint.get("effect") == L.TAINT_EFFECT


def _taints(current: list[dict[str, Any]], target: Target, changes: list[str]) -> list | None:
    present = any(_is_ours(t) for t in current)
    if target.certified and present:
        changes.append(f"taint {L.TAINT_KEY}:{L.TAINT_EFFECT} removed")
        return [t for t in current if not _is_ours(t)]
    if not target.certified and not present:
        changes.append(f"taint {L.TAINT_KEY}={L.TAINT_VALUE}:{L.TAINT_EFFECT} added")
        return [*current, {"key": L.TAINT_KEY, "value": L.TAINT_VALUE, "effect": L.TAINT_EFFECT}]
    return None


def plan(node: dict[str, Any], target: Target) -> Plan:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    out = Plan(body=None)
    patch_meta: dict[str, Any] = {}
    patch_spec: dict[str, Any] = {}

    label_patch: dict[str, str | None] = {}
    for key, want in target.labels.items():
        if want is None and key in labels:
            label_patch[key] = None
            out.changes.append(f"label {key} removed")
        elif want is not None and labels.get(key) != want:
            label_patch[key] = want
            out.changes.append(f"label {key}={want}")
    if label_patch:
        patch_meta["labels"] = label_patch

    taints = _taints(list(spec.get("taints") or []), target, out.changes)
    if taints is not None:
        patch_spec["taints"] = taints

    cordoned = bool(spec.get("unschedulable"))
    ours = annotations.get(L.ANNOTATION_CORDONED_BY) == L.CORDONED_BY_US
    note: dict[str, str | None] = {}
    if target.cordon == "cordon" and not cordoned:
        patch_spec["unschedulable"] = True
        note[L.ANNOTATION_CORDONED_BY] = L.CORDONED_BY_US
        out.changes.append("cordoned (spec.unschedulable=true)")
    elif target.cordon == "cordon" and not ours:
        out.notes.append("already cordoned by someone else: left as it is")
    elif target.cordon == "uncordon-ours" and cordoned and ours:
        patch_spec["unschedulable"] = False
        note[L.ANNOTATION_CORDONED_BY] = None
        out.changes.append("uncordoned (gpuboot had cordoned it)")
    elif target.cordon == "uncordon-ours" and cordoned:
        out.notes.append("stays cordoned: cordoned by someone else, not by gpuboot")
    elif target.cordon == "uncordon-ours" and ours:
        note[L.ANNOTATION_CORDONED_BY] = None  # someone uncordoned it by hand: stale mark
        out.changes.append(f"annotation {L.ANNOTATION_CORDONED_BY} removed")
    if note:
        patch_meta["annotations"] = note

    if patch_meta or patch_spec:
        patch_meta["resourceVersion"] = meta.get("resourceVersion")
        out.body = {"metadata": patch_meta, **({"spec": patch_spec} if patch_spec else {})}
    return out
