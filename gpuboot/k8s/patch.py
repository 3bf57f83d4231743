"""From a node as the API server returned it and the gate's target: the strategic-merge
patch to send and the changes it makes, in words. Pure, no I/O.

``spec.taints`` has no merge key in the Node schema, so any patch replaces the whole
list: the patch carries the node's current list minus (or plus) the uncertified taint,
every other taint byte-for-byte as read, and ``metadata.resourceVersion`` so the API
server refuses it (409) if anything changed the node since it was read.

Taking a node out is gpuboot's own keyed NoSchedule taint; the shared cordon bit is set
only when the caller drains the node (evictions need it), so another tool's cordon and
gpuboot's take-out never share one bit. Whenever gpuboot adds its taint or its cordon it
writes when (the take-out window is rebuilt from that after a restart) and whether the node
was already unschedulable; a release removes both. A cordon gpuboot did not make is never
lifted. A held target (failing, but the disruption budget or the breaker keeps it in) is
only flagged: noncompliant, with the reason; nothing added, nothing of gpuboot's removed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.k8s.decision import Target

TAKE_OUT_MARKS = (L.ANNOTATION_TAKEN_OUT_AT, L.ANNOTATION_WAS_UNSCHEDULABLE, L.ANNOTATION_REASON)
MAX_ACTION_TEXT = 120  # a step's or result's words in the bounded actions annotation


@dataclass
class Plan:
    body: dict[str, Any] | None  # None: the node already is as wanted
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _is_ours(taint: dict[str, Any]) -> bool:
    return taint.get("key") == L.TAINT_KEY and taint.get("effect") == L.TAINT_EFFECT


def _taints(current: list[dict[str, Any]], target: Target, changes: list[str]) -> list | None:
    present = any(_is_ours(t) for t in current)
    if target.held:
        return None  # flagged only: the budget or the breaker keeps it in service
    if target.certified and present:
        changes.append(f"taint {L.TAINT_KEY}:{L.TAINT_EFFECT} removed")
        return [t for t in current if not _is_ours(t)]
    if not target.certified and not present:
        changes.append(f"taint {L.TAINT_KEY}={L.TAINT_VALUE}:{L.TAINT_EFFECT} added")
        return [*current, {"key": L.TAINT_KEY, "value": L.TAINT_VALUE, "effect": L.TAINT_EFFECT}]
    return None


def _one_line(text: str, limit: int) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _why(target: Target) -> str | None:
    """The reason annotation's words: why held back, else the failing condition's message
    (it names the rule ids), else the verdict and the failed-rules label."""
    if target.held:
        return target.held
    for status, _reason, message in target.conditions.values():
        if status == "False" and message:
            return message
    failed = target.labels.get(L.LABEL_FAILED_RULES)
    return f"{target.verdict}: {failed.replace('_', ', ')}" if failed else None


def _set(
    patch: dict[str, str | None], current: Mapping[str, str], key: str, want: str | None
) -> None:
    """Record ``key`` -> ``want`` in ``patch`` if it changes the node (None: remove)."""
    if want is None and key in current:
        patch[key] = None
    elif want is not None and current.get(key) != want:
        patch[key] = want


def _labels(target: Target, current: Mapping[str, str]) -> dict[str, str | None]:
    patch: dict[str, str | None] = {}
    for key, want in target.labels.items():
        _set(patch, current, key, want)
    _set(patch, current, L.LABEL_STATE, L.STATE_NONCOMPLIANT if target.held else target.state)
    return patch


def _cordon(
    node: dict[str, Any], target: Target, note: dict[str, str | None], out: Plan
) -> dict[str, Any]:
    """The spec.unschedulable part of the patch; the cordoned-by mark goes in ``note``."""
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    ours = annotations.get(L.ANNOTATION_CORDONED_BY) == L.CORDONED_BY_US
    if target.held:
        return {}
    if target.drain and not cordoned:
        note[L.ANNOTATION_CORDONED_BY] = L.CORDONED_BY_US
        out.changes.append("cordoned (spec.unschedulable=true)")
        return {"unschedulable": True}
    if target.drain and not ours:
        out.notes.append("already cordoned by someone else: left as it is")
    elif target.cordon == "uncordon-ours" and cordoned and ours:
        note[L.ANNOTATION_CORDONED_BY] = None
        out.changes.append("uncordoned (gpuboot had cordoned it)")
        return {"unschedulable": False}
    elif target.cordon == "uncordon-ours" and cordoned:
        out.notes.append("stays cordoned: cordoned by someone else, not by gpuboot")
    elif target.cordon == "uncordon-ours" and ours:
        note[L.ANNOTATION_CORDONED_BY] = None  # someone uncordoned it by hand: stale mark
        out.changes.append(f"annotation {L.ANNOTATION_CORDONED_BY} removed")
    return {}


def _take_out_marks(
    node: dict[str, Any], target: Target, took_out: bool, now: float
) -> dict[str, str | None]:
    """taken-out-at, was-unschedulable and reason: written with gpuboot's first taint or
    cordon, the reason kept current while the node fails (or is held), all three gone on
    release."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    marks: dict[str, str | None] = {}
    if target.certified and not target.held:
        for key in TAKE_OUT_MARKS:
            _set(marks, annotations, key, None)
        return marks
    if took_out and L.ANNOTATION_TAKEN_OUT_AT not in annotations:
        marks[L.ANNOTATION_TAKEN_OUT_AT] = str(int(now))
        spec = node.get("spec") or {}
        cordoned_by_us = annotations.get(L.ANNOTATION_CORDONED_BY) == L.CORDONED_BY_US
        if spec.get("unschedulable") and not cordoned_by_us:
            marks[L.ANNOTATION_WAS_UNSCHEDULABLE] = "true"
    if why := _why(target):
        _set(marks, annotations, L.ANNOTATION_REASON, _one_line(why, L.MAX_REASON))
    return marks


def plan(node: dict[str, Any], target: Target, *, now: float | None = None) -> Plan:
    """``now``: unix seconds stamped on a take-out (default: the clock)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    annotations = meta.get("annotations") or {}
    out = Plan(body=None)
    patch_meta: dict[str, Any] = {}
    patch_spec: dict[str, Any] = {}

    label_patch = _labels(target, meta.get("labels") or {})
    for key, want in label_patch.items():
        out.changes.append(f"label {key} removed" if want is None else f"label {key}={want}")
    if label_patch:
        patch_meta["labels"] = label_patch

    taint_changes: list[str] = []
    taints = _taints(list(spec.get("taints") or []), target, taint_changes)
    out.changes += taint_changes
    if taints is not None:
        patch_spec["taints"] = taints

    note: dict[str, str | None] = {}
    patch_spec.update(_cordon(node, target, note, out))
    took_out = (taints is not None and not target.certified) or bool(
        patch_spec.get("unschedulable")
    )
    marks = _take_out_marks(node, target, took_out, time.time() if now is None else now)
    extra: dict[str, str | None] = {}
    for key, want in {**marks, **target.annotations}.items():
        _set(extra, annotations, key, want)
    for key, want in extra.items():
        out.changes.append(
            f"annotation {key} removed" if want is None else f"annotation {key}={want}"
        )
    note.update(extra)
    if note:
        patch_meta["annotations"] = note

    if patch_meta or patch_spec:
        patch_meta["resourceVersion"] = meta.get("resourceVersion")
        out.body = {"metadata": patch_meta, **({"spec": patch_spec} if patch_spec else {})}
    return out


def read_actions(annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """The node's recorded actions, oldest first; an unreadable annotation (edited by hand)
    reads as none rather than stopping the caller."""
    try:
        doc = json.loads(annotations.get(L.ANNOTATION_ACTIONS) or "[]")
    except ValueError:
        return []
    if not isinstance(doc, list):
        return []
    return [a for a in doc if isinstance(a, dict) and isinstance(a.get("at"), int | float)]


def append_action(annotations: Mapping[str, str], step: str, result: str, at: float) -> str:
    """The actions annotation's new value: the node's actions plus this one, the newest
    ``MAX_ACTIONS`` kept (the history file holds them all)."""
    entry = {
        "at": int(at),
        "step": _one_line(step, MAX_ACTION_TEXT),
        "result": _one_line(result, MAX_ACTION_TEXT),
    }
    kept = [*read_actions(annotations), entry][-L.MAX_ACTIONS :]
    return json.dumps(kept, separators=(",", ":"))
