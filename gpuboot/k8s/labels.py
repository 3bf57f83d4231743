"""gpuboot's vocabulary on the Node object: the taint, label, annotation and condition
names every module that touches a Node imports from here, and label values made legal (at
most 63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at both ends, or empty)."""

from __future__ import annotations

import re

PREFIX = "gpuboot.io/"
FIELD_MANAGER = "gpuboot"  # the manager of gpuboot's fields in the Node's managedFields
TAINT_KEY = PREFIX + "uncertified"
TAINT_VALUE = "true"
TAINT_EFFECT = "NoSchedule"

LABEL_CERTIFIED = PREFIX + "certified"
LABEL_STACK = PREFIX + "stack"
LABEL_CERT_SHA = PREFIX + "cert-sha256"
LABEL_CERT_EXPIRY = PREFIX + "cert-expiry"
LABEL_FAILED_RULES = PREFIX + "failed-rules"
# set by a scan whose hardware fault came back after the reboot threshold (gpuboot.escalation)
LABEL_RECOMMENDED_ACTION = PREFIX + "recommended-action"
ACTION_RMA = "hardware-inspection-rma"
# the operator's opt-out: "false" means gpuboot takes no action on the node
LABEL_MANAGED = PREFIX + "managed"
# what gpuboot did to the node, readable by selectors (kubectl get nodes -l gpuboot.io/state)
LABEL_STATE = PREFIX + "state"
STATE_TAKEN_OUT = "taken-out"
STATE_NONCOMPLIANT = "noncompliant"  # fails, but held back: not taken out
STATE_REMEDIATING = "remediating"
STATE_QUARANTINED = "quarantined"
STATES = (STATE_TAKEN_OUT, STATE_NONCOMPLIANT, STATE_REMEDIATING, STATE_QUARANTINED)
# set when remediation gives up on the node (needs hardware): no further automatic action
LABEL_ACTION = PREFIX + "action"
QUARANTINE_RMA = "rma"
# what a node offers pods over RDMA, for a CNI's or scheduler's node selector: set only on a
# node whose RDM rules passed (gpuboot.k8s.rdma_labels)
LABEL_RDMA_MODE = PREFIX + "rdma-mode"  # sriov | shared
LABEL_RDMA_RAILS = PREFIX + "rdma-rails"  # the RoCE rail NICs, one per GPU
LABEL_RDMA_VFS_PER_RAIL = PREFIX + "rdma-vfs-per-rail"  # sriov only
RDMA_LABELS = (LABEL_RDMA_MODE, LABEL_RDMA_RAILS, LABEL_RDMA_VFS_PER_RAIL)
ALL_LABELS = (
    LABEL_CERTIFIED,
    LABEL_STACK,
    LABEL_CERT_SHA,
    LABEL_CERT_EXPIRY,
    LABEL_FAILED_RULES,
    LABEL_RECOMMENDED_ACTION,
    *RDMA_LABELS,
)

# Marks a cordon gpuboot made, so gpuboot never lifts a cordon someone else made.
ANNOTATION_CORDONED_BY = PREFIX + "cordoned-by"
CORDONED_BY_US = "gpuboot"
# unix seconds when gpuboot took the node out: the take-out window is rebuilt from these,
# so a restarted gpuboot still counts its recent take-outs
ANNOTATION_TAKEN_OUT_AT = PREFIX + "taken-out-at"
# "true": the node was already unschedulable (someone else's cordon) when gpuboot took it out
ANNOTATION_WAS_UNSCHEDULABLE = PREFIX + "was-unschedulable"
# unix seconds when gpuboot saw a human undo its take-out (uncordon, taint removed): the
# node is left alone for a cool-down from then
ANNOTATION_CANCELLED_AT = PREFIX + "cancelled-at"
# one line: the failing rule ids, or why a failing node was held back
ANNOTATION_REASON = PREFIX + "reason"
# JSON list, newest last, at most MAX_ACTIONS entries {"at": unix, "step": str, "result": str}
ANNOTATION_ACTIONS = PREFIX + "actions"
MAX_ACTIONS = 10
MAX_REASON = 256  # annotations allow far more; a reason is one line a human reads

CONDITION_CERTIFIED = "GPUBootCertified"
CONDITION_COMPLIANT = "GPUBootCompliant"

MAX_VALUE = 63
_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
VALID_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")


def label_value(text: object) -> str:
    """``text`` as a legal label value: other characters become ``_``, cut to 63, trimmed
    to alphanumerics at both ends (the API server rejects the whole patch otherwise)."""
    value = _BAD.sub("_", str(text))
    value = _EDGE.sub("", value)[:MAX_VALUE]
    return _EDGE.sub("", value)  # the cut may leave a separator at the end


def rules_value(rule_ids: list[str]) -> str:
    """Failed rule ids joined by ``_``, cut at a whole id when all do not fit in 63."""
    ids = [label_value(r) for r in rule_ids]
    out = ""
    for rid in filter(None, ids):
        candidate = f"{out}_{rid}" if out else rid
        if len(candidate) > MAX_VALUE:
            break
        out = candidate
    # a single id longer than the limit still says something: its cut form
    return out or (label_value("_".join(filter(None, ids))) if ids else "")
