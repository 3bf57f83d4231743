"""Who holds a node and how it is let go: `gpuboot node explain` and `gpuboot node release`.

A node can be held by gpuboot (its state label, its keyed taint, a cordon it made, a
quarantine in the remediation history), by another tool (its marker on the node, or the
node's Lease), or by nobody. Release removes gpuboot's marks only: another tool's marker,
a cordon gpuboot did not make, a Lease held by someone else all stay."""

from __future__ import annotations

import getpass
import json
import shlex
import time
from pathlib import Path
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.k8s import lease, ownership
from gpuboot.k8s.client import TIMEOUT
from gpuboot.k8s.patch import append_action, read_actions
from gpuboot.remediate import cluster, record
from gpuboot.remediate import ladder as LD

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
# gpuboot's own marks on a node, all removed by a release
OUR_LABELS = (L.LABEL_STATE, L.LABEL_ACTION, L.LABEL_RECOMMENDED_ACTION)
OUR_ANNOTATIONS = (
    L.ANNOTATION_TAKEN_OUT_AT,
    L.ANNOTATION_WAS_UNSCHEDULABLE,
    L.ANNOTATION_REASON,
    L.ANNOTATION_CORDONED_BY,
    L.ANNOTATION_CANCELLED_AT,
)


def _when(at: Any) -> str | None:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(at)))
    except (TypeError, ValueError, OverflowError):
        return None


def lease_holder(api: Any, name: str) -> dict[str, Any] | None:
    """The node's Lease (medik8s's name): holder and renew time, or None when there is none."""
    try:
        resp = api.coordination.read_namespaced_lease(
            lease.lease_name(name),
            lease.NAMESPACE,
            _preload_content=False,
            _request_timeout=TIMEOUT,
        )
    except api.api_error as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise
    spec = json.loads(resp.data).get("spec") or {}
    return {
        "holder": spec.get("holderIdentity"),
        "renewed": spec.get("renewTime"),
        "duration_s": spec.get("leaseDurationSeconds"),
    }


def release_command(
    name: str, kubeconfig: str | None, context: str | None, scan_history: str | None
) -> str:
    words = ["gpuboot", "node", "release", name, "--reason", "WHY"]
    if scan_history:
        words += ["--history", scan_history]
    if kubeconfig:
        words += ["--kubeconfig", kubeconfig]
    if context:
        words += ["--k8s-context", context]
    return shlex.join(words).replace("WHY", "'<why it may serve again>'")


def _foreign_command(name: str, node: dict[str, Any], kubectl: str) -> str | None:
    """The kubectl line that removes a foreign marker gpuboot can name; None for a tool's
    own state (NVSentinel, NodeWright): that tool releases it."""
    if cluster.meta(node, "labels").get(L.LABEL_MANAGED) == "false":
        return f"{kubectl} label node {shlex.quote(name)} {L.LABEL_MANAGED}-"
    taints = (node.get("spec") or {}).get("taints") or []
    if any(t.get("key") == OUT_OF_SERVICE for t in taints):
        return f"{kubectl} taint node {shlex.quote(name)} {OUT_OF_SERVICE}-"
    return None


def explain(
    name: str,
    *,
    api: Any = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    history: Path,
    scan_history: str | None = None,
) -> dict[str, Any]:
    """Who holds the node, why, since when, and the one command that releases it
    (``history``: the remediation history; ``scan_history`` as the operator named it)."""
    past = LD.since_release(record.past_of(name, record.read(history)))
    doc: dict[str, Any] = {"node": name, "held_by": None, "why": None, "since": None}
    doc["steps"] = [
        {"at": _when(p.at), "step": p.step, "result": p.result, "fault": p.fault} for p in past
    ]
    quarantined = [p for p in past if p.step == LD.QUARANTINE]
    if quarantined:
        doc.update(held_by="gpuboot", state=L.STATE_QUARANTINED, since=_when(quarantined[-1].at))
        doc["why"] = f"quarantined for hardware work: {quarantined[-1].fault}"
    if api is not None:
        node = cluster.read_node(api, name)
        labels, notes = cluster.meta(node, "labels"), cluster.meta(node, "annotations")
        taints = (node.get("spec") or {}).get("taints") or []
        held = lease_holder(api, name)
        doc.update(
            state=labels.get(L.LABEL_STATE, doc.get("state")),
            taint=any(cluster.ours_taint(t) for t in taints),
            cordoned_by_gpuboot=notes.get(L.ANNOTATION_CORDONED_BY) == L.CORDONED_BY_US,
            unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
            lease=held,
            foreign=ownership.foreign_marker(node),
            cancelled=ownership.cancelled(node),
            actions=read_actions(notes),
        )
        ours = doc["state"] or doc["taint"] or doc["cordoned_by_gpuboot"]
        if doc["foreign"]:
            kubectl = shlex.join(["kubectl", *(["--kubeconfig", kubeconfig] if kubeconfig else [])])
            doc.update(held_by="another tool", why=doc["foreign"])
            doc["release"] = _foreign_command(name, node, kubectl) or (
                f"none from gpuboot: the tool that set it releases it ({doc['foreign']})"
            )
            return doc
        if held and held.get("holder") not in (None, "", lease.HOLDER):
            doc.update(held_by=f"Lease holder {held['holder']}", since=held.get("renewed"))
            doc["why"] = f"{held['holder']} holds {lease.NAMESPACE}/{lease.lease_name(name)}"
            doc["release"] = f"none from gpuboot: {held['holder']} releases its Lease"
            return doc
        if ours:
            doc["held_by"] = "gpuboot"
            doc["why"] = (
                notes.get(L.ANNOTATION_REASON)
                or doc["why"]
                or (f"state {doc['state']}" if doc["state"] else "gpuboot's taint or cordon")
            )
            doc["since"] = _when(notes.get(L.ANNOTATION_TAKEN_OUT_AT)) or doc["since"]
    doc["release"] = (
        release_command(name, kubeconfig, context, scan_history)
        if doc["held_by"] == "gpuboot"
        else None
    )
    return doc


def release(
    name: str,
    reason: str,
    *,
    api: Any = None,
    history: Path,
    by: str | None = None,
    scan_history: Path | None = None,
) -> dict[str, Any]:
    """Remove gpuboot's marks from the node (and its quarantine from the history), record
    who and why. A cordon is lifted only when gpuboot made it and the node was schedulable
    before; another tool's marks are never touched."""
    who = by or _user()
    changes: list[str] = []
    if api is not None:
        node = cluster.read_node(api, name)
        labels, notes = cluster.meta(node, "labels"), cluster.meta(node, "annotations")
        spec = node.get("spec") or {}
        taints = spec.get("taints") or []
        new_spec: dict[str, Any] = {}
        if any(cluster.ours_taint(t) for t in taints):
            new_spec["taints"] = [t for t in taints if not cluster.ours_taint(t)]
            changes.append(f"taint {L.TAINT_KEY} removed")
        ours_cordon = notes.get(L.ANNOTATION_CORDONED_BY) == L.CORDONED_BY_US
        if (
            ours_cordon
            and spec.get("unschedulable")
            and notes.get(L.ANNOTATION_WAS_UNSCHEDULABLE) != "true"
        ):
            new_spec["unschedulable"] = None
            changes.append("uncordoned (gpuboot's cordon)")
        drop_labels = {k: None for k in OUR_LABELS if k in labels}
        drop_notes: dict[str, str | None] = {k: None for k in OUR_ANNOTATIONS if k in notes}
        changes += [f"label {k} removed" for k in drop_labels]
        changes += [f"annotation {k} removed" for k in drop_notes]
        drop_notes[L.ANNOTATION_ACTIONS] = append_action(
            notes, LD.RELEASE, f"by {who}: {reason}", time.time()
        )
        cluster.patch(api, node, labels=drop_labels, annotations=drop_notes, spec=new_spec)
        resume = ownership.resume_nvsentinel(cluster.read_node(api, name))
        if resume is not None:  # a step was cut short: NVSentinel gets its node back
            cluster.send(api, name, resume)
            changes.append(f"label {ownership.NVSENTINEL_MANAGED} restored")
        lease.release(api, name)  # only our own Lease; idempotent
    rec = {**record.entry(LD.RELEASE, "done"), "host": name, "by": who, "reason": reason}
    record.append(history, [rec])
    changes.append(f"release recorded in {history}")
    if scan_history is not None:  # its RMA escalation ends; its faults count afresh
        from gpuboot import scan

        scan.record_release(scan_history, name, by=who, reason=reason)
        changes.append(f"open escalations closed in {scan_history}")
    return {"node": name, "by": who, "reason": reason, "changes": changes}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        return "unknown"
