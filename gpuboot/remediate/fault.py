"""A failing node's fault as the ladder reads it, from its report and its evidence."""

from __future__ import annotations

import re
from pathlib import Path

from gpuboot.escalation import Observation, observe_bundle
from gpuboot.evidence.xid_catalog import xid_info
from gpuboot.ids import remediation
from gpuboot.remediate.ladder import Fault
from gpuboot.results import NodeReport
from gpuboot.verdict import Status

_XID = re.compile(r"^xid:(\d+)@([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})$")
# A reboot covers what a reset would; the worse bucket wins when a node shows both.
_BUCKET_ORDER = ("RESET_GPU", "RESTART_BM")


def fault_of(node: NodeReport, bundle: Path | None) -> Fault | None:
    """The fault of a node that FAILs (None otherwise: ERROR, unknown, is never a fault).

    Its key is the hardware faults the evidence shows (stable across scans and boots), else
    the failing rule ids. Reconcile applies when a failing rule has tasks that make it true."""
    if node.verdict != Status.FAIL:
        return None
    rules = tuple(sorted(f.rule for f in node.findings if f.status == Status.FAIL))
    seen = observe_bundle(bundle / node.host) if bundle else Observation()
    buckets, gpus = set(), set()
    for key in seen.faults:
        m = _XID.match(key)
        if m:
            bucket = xid_info(int(m.group(1))).action
            buckets.add(bucket)
            if bucket == "RESET_GPU":
                gpus.add(m.group(2) + ".0")
    bucket = max((b for b in buckets if b in _BUCKET_ORDER), key=_BUCKET_ORDER.index, default=None)
    escalated = {e.fault for e in node.escalations or ()}
    return Fault(
        key=",".join(sorted(seen.faults)) or "rules:" + ",".join(rules),
        rules=rules,
        bucket=bucket,
        gpus=tuple(sorted(gpus)),
        drifted=any(remediation(r)["fix_tasks"] for r in rules),
        escalated=bool(escalated & set(seen.faults)) or bool(escalated and not seen.faults),
    )
