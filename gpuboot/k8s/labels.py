"""The gate's vocabulary on the Node object: taint, label and annotation keys, and label
values made legal (at most 63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at both ends,
or empty)."""

from __future__ import annotations

import re

PREFIX = "gpuboot.io/"
TAINT_KEY = PREFIX + "uncertified"
TAINT_VALUE = "true"
TAINT_EFFECT = "NoSchedule"

LABEL_CERTIFIED = PREFIX + "certified"
LABEL_STACK = PREFIX + "stack"
LABEL_CERT_SHA = PREFIX + "cert-sha256"
LABEL_CERT_EXPIRY = PREFIX + "cert-expiry"
LABEL_FAILED_RULES = PREFIX + "failed-rules"
# set by a scan whose hardware fault came back after the reboot threshold (gpuboot.escalation)
LABEL_ACTION = PREFIX + "recommended-action"
ACTION_RMA = "hardware-inspection-rma"
ALL_LABELS = (
    LABEL_CERTIFIED,
    LABEL_STACK,
    LABEL_CERT_SHA,
    LABEL_CERT_EXPIRY,
    LABEL_FAILED_RULES,
    LABEL_ACTION,
)

# Marks a cordon gpuboot made, so gpuboot never lifts a cordon someone else made.
ANNOTATION_CORDONED_BY = PREFIX + "cordoned-by"
CORDONED_BY_US = "gpuboot"

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
