"""gpuboot's node conditions, GPUBootCertified and GPUBootCompliant, written through the
Node's status subresource (where the kubelet and the Node Readiness Controller look).

Status "True", "False" or "Unknown": a rule that FAILed makes it False; a rule the harness
could not run (ERROR) and nothing failed makes it Unknown, never False (what could not be
read says nothing of the hardware). The reason is one CamelCase word, the message names the
rule ids, cut to a bounded length at a whole id.

``lastTransitionTime`` moves only when the status changes (what a controller keys on);
``lastHeartbeatTime`` is the time of each judgement, so an operator sees that gpuboot is
still looking even while nothing changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.k8s.client import TIMEOUT, Api, read_node
from gpuboot.results import NodeReport
from gpuboot.verdict import Status

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
STATUSES = (TRUE, FALSE, UNKNOWN)

REASON_CERTIFIED = "Certified"
REASON_COMPLIANT = "Compliant"
REASON_RULES_FAILED = "RulesFailed"
REASON_RULES_WARNED = "RulesWarned"  # degraded but working: certified only with --allow-warn
REASON_CHECK_COULD_NOT_RUN = "CheckCouldNotRun"

MAX_MESSAGE = 256  # the whole list of ids lives in the run's report; the node says enough
# metav1.Condition's reason rule; Node conditions are not validated, so it is checked here
_REASON = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_,:]*[A-Za-z0-9_])?$")

Wanted = Mapping[str, tuple[str, str, str]]  # type -> (status, reason, message)


def rules_message(parts: Iterable[tuple[str, list[str]]], limit: int = MAX_MESSAGE) -> str:
    """``"failed: A, B; could not run: C"`` from (words, rule ids) pairs, cut at a whole id
    with the count left out (``"(+3 more)"``), within ``limit`` characters."""
    items = [(words, rid) for words, ids in parts for rid in ids]
    out = ""
    for n, (words, rid) in enumerate(items):
        if n and items[n - 1][0] == words:
            piece = f", {rid}"
        else:
            piece = f"{'; ' if out else ''}{words}: {rid}"
        left = len(items) - n - 1
        # room kept for the count, should the next id not fit
        if len(out) + len(piece) + (len(f" (+{left} more)") if left else 0) > limit:
            return f"{out} (+{len(items) - n} more)".lstrip()
        out += piece
    return out


def judged(
    node: NodeReport, *, passed_reason: str, allow_warn: bool = False
) -> tuple[str, str, str]:
    """The condition a node's findings give: False naming the failed rules (and those that
    could not run), Unknown when only the harness failed, False for a WARN unless
    ``allow_warn``, else True with ``passed_reason``."""
    by_status: dict[str, list[str]] = {}
    for finding in node.findings:
        by_status.setdefault(finding.status, []).append(finding.rule)
    failed = sorted(set(by_status.get(Status.FAIL, ())))
    errored = sorted(set(by_status.get(Status.ERROR, ())))
    warned = sorted(set(by_status.get(Status.WARN, ())))
    if failed:
        message = rules_message([("failed", failed), ("could not run", errored)])
        return FALSE, REASON_RULES_FAILED, message
    if errored or node.verdict == Status.ERROR:
        return UNKNOWN, REASON_CHECK_COULD_NOT_RUN, rules_message([("could not run", errored)])
    if warned and not allow_warn:
        return FALSE, REASON_RULES_WARNED, rules_message([("warned", warned)])
    return TRUE, passed_reason, "every rule passed" + (" or warned" if warned else "")


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _checked(kind: str, status: str, reason: str, message: str) -> str:
    if status not in STATUSES:
        raise ValueError(f"condition {kind}: status {status!r} is not one of {STATUSES}")
    if not _REASON.match(reason):
        raise ValueError(f"condition {kind}: reason {reason!r} is not one CamelCase word")
    # one line, bounded: a reader of `kubectl describe node` sees it whole
    line = " ".join(str(message).split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


def _changes(node: dict[str, Any], wanted: Wanted, now: datetime) -> tuple[list, list[str]]:
    current = {c.get("type"): c for c in ((node.get("status") or {}).get("conditions") or [])}
    stamp = _stamp(now)
    conditions, words = [], []
    for kind, (status, reason, message) in wanted.items():
        message = _checked(kind, status, reason, message)
        old = current.get(kind) or {}
        said = (old.get("status"), old.get("reason"), old.get("message"))
        same = said == (status, reason, message)
        if same and old.get("lastHeartbeatTime") == stamp:
            continue
        if not same:
            words.append(f"condition {kind}={status} ({reason}: {message})")
        moved = old.get("status") != status or not old.get("lastTransitionTime")
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp if moved else old["lastTransitionTime"],
            }
        )
    return conditions, words


def condition_patch(node: dict[str, Any], wanted: Wanted, now: datetime) -> dict | None:
    """The body of ``PATCH /api/v1/nodes/{name}/status``: only gpuboot's conditions, which
    the strategic merge puts in place by ``type`` beside the kubelet's. No resourceVersion:
    the kubelet rewrites the status every few seconds and a guard would lose to it; the
    merge touches nothing but these entries. None when nothing would change."""
    conditions, _ = _changes(node, wanted, now)
    return {"status": {"conditions": conditions}} if conditions else None


def write_conditions(
    api: Api, name: str, wanted: Wanted, *, now: datetime, dry_run: bool
) -> list[str]:
    """Set ``wanted`` on node ``name``; the changes of status, reason or message in words
    (a refreshed heartbeat alone is none). The client's errors propagate: the caller
    records them against the node."""
    if not wanted:
        return []
    conditions, words = _changes(read_node(api, name), wanted, now)
    if not conditions:
        return []
    api.core.patch_node_status(
        name,
        {"status": {"conditions": conditions}},
        field_manager=L.FIELD_MANAGER,
        _preload_content=False,
        _request_timeout=TIMEOUT,
        **({"dry_run": "All"} if dry_run else {}),
    )
    return words
