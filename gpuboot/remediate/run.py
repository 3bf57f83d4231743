"""`gpuboot remediate` and `scan --remediate`: the ladder (gpuboot.remediate.ladder) run on
each failing node with the real steps (gpuboot.remediate.steps) injected.

What the ladder is told of a node: its fault (from the report and its evidence; a fault
the scan history saw come back after the reboot threshold is escalated), its past steps
(the remediation history beside the fleet's scan history, and on a cluster the node's
actions annotation) and its standing (quarantined, another tool's, cancelled by a human
within the cool-down, unreadable). Nodes are remediated one at a time: a step takes a
node out of service.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuboot.inventory import Inventory, load_inventory, select_hosts
from gpuboot.k8s.budget import critical
from gpuboot.k8s.gate import DEFAULT_COOLDOWN_S
from gpuboot.remediate import cluster, record
from gpuboot.remediate import ladder as LD
from gpuboot.remediate.fault import fault_of
from gpuboot.remediate.steps import CERTIFY_TIMEOUT_S, Cluster, Steps
from gpuboot.results import NodeReport, RunReport

EXIT_OK, EXIT_FAILING, EXIT_BROKE = 0, 1, 3


@dataclass
class NodeRemediation:
    host: str
    node: str  # the Kubernetes node name (the host, outside a cluster)
    climb: LD.Climb

    def to_dict(self) -> dict[str, Any]:
        f = self.climb.fault
        return {
            "host": self.host,
            "node": self.node,
            "fault": {
                "key": f.key,
                "rules": list(f.rules),
                "bucket": f.bucket,
                "gpus": list(f.gpus),
            },
            "skipped": self.climb.skipped,
            "steps": [s.to_dict() for s in self.climb.steps],
            "outcome": self.climb.outcome,
        }


@dataclass
class RemediationResult:
    nodes: list[NodeRemediation] = field(default_factory=list)
    dry_run: bool = False
    history: Path | None = None

    @property
    def exit_code(self) -> int:
        """0: every remediated node passed (or nothing to do); 1: a node still fails, was
        quarantined, held or skipped; 3: a step could not judge (the harness broke)."""
        outcomes = [n.climb.outcome for n in self.nodes]
        if any(o == LD.UNKNOWN for o in outcomes):
            return EXIT_BROKE
        if self.dry_run or all(o == LD.PASSED for o in outcomes):
            return EXIT_OK
        return EXIT_FAILING

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "history": str(self.history) if self.history else None,
            "nodes": [n.to_dict() for n in self.nodes],
            "exit_code": self.exit_code,
        }


def run_ladder(
    inventory: str | Path | Inventory,
    *,
    limit: str | None = None,
    report: RunReport | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    limits: Any = None,
    dry_run: bool = False,
    progress: Callable[[str], None] = lambda _m: None,
    sign_key: Path | None = None,
    history: Path | None = None,
    scan_history: Path | None = None,
    certify_timeout_s: float = CERTIFY_TIMEOUT_S,
    cooldown_s: int = DEFAULT_COOLDOWN_S,
) -> RemediationResult:
    """Remediate the failing nodes of ``report`` (None: certify the selection first).
    ``sign_key``: certificates for the nodes that pass, so the gate returns them to service.
    ``cooldown_s``: after a human cancelled gpuboot's take-out, how long the node is left
    alone (unless its fault is critical). A partial certificate returns a node to service
    only where its ``gpuboot_accept_partial`` accepts every gap, as certify's join gate.
    ``scan_history``: the fleet's scan history (default GPUBOOT_HOME's): the remediation
    history sits beside it, and a fault it saw come back after the reboot threshold
    (gpuboot.escalation) goes straight to quarantine; ``history`` overrides the former.
    """
    from gpuboot import certify

    inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
    hosts = select_hosts(inv, limit)  # a bad --limit is refused before any host
    api = None
    if kubeconfig:
        from gpuboot.k8s.client import connect

        api = connect(kubeconfig, context)  # an unusable kubeconfig: bad input, nothing touched
    history = history or record.beside(scan_history)
    if report is None:
        report = certify.certify(inv, limit=",".join(hosts), progress=progress)
        report = _escalated(report, scan_history, progress)
    names = inv.k8s_node_names()
    records = record.read(history)
    out = RemediationResult(dry_run=dry_run, history=history)
    for node in report.nodes:
        if node.host not in hosts:
            continue
        fault = fault_of(node, report.bundle)
        if fault is None:
            continue
        name = names.get(node.host, node.host)
        facts, past, member = _standing(api, name, node, records, cooldown_s)
        cl = None
        if api is not None and kubeconfig and member:
            cl = Cluster(api, limits, kubeconfig, context, sign_key)
        if dry_run:
            do: Callable[[str], tuple[str, str]] = _would
        else:
            do = Steps(
                inv,
                node.host,
                name,
                fault,
                cluster_=cl,
                history=history,
                certify_timeout_s=certify_timeout_s,
                urgent=critical(node) is not None,
                progress=progress,
            )
        out.nodes.append(
            NodeRemediation(node.host, name, LD.climb(facts, fault, past, time.time(), do))
        )
    return out


def _escalated(
    report: RunReport, scan_history: Path | None, warn: Callable[[str], None]
) -> RunReport:
    """The certify report with each node's escalations as a scan would find them: the
    hardware faults the scan history saw in more boots than the reboot threshold."""
    from dataclasses import replace

    from gpuboot import escalation
    from gpuboot.scan import default_history, load_history

    if report.bundle is None:
        return report
    hist = load_history(scan_history or default_history(), warn)
    nodes = []
    for node in report.nodes:
        past = hist.nodes.get(node.host)
        seen = escalation.observe_bundle(report.bundle / node.host)
        found = escalation.escalations(seen, past.faults if past else None)
        nodes.append(replace(node, escalations=tuple(found)))
    return replace(report, nodes=tuple(nodes))


def _would(_step: str) -> tuple[str, str]:
    return LD.WOULD, ""


def _standing(
    api: Any, name: str, node: NodeReport, records: list[dict[str, Any]], cooldown_s: int
) -> tuple[LD.Facts, list[LD.Past], bool]:
    """The node's facts, past steps (the history file's, and on a cluster the node's own
    annotation) and whether the cluster has it: a host the cluster does not know is
    remediated as one outside Kubernetes; a node that cannot be read gets nothing."""
    past = record.past_of(node.host, records)
    quarantined = any(
        p.step == LD.QUARANTINE and p.result == LD.DONE for p in LD.since_release(past)
    )
    if api is None:
        return LD.Facts(quarantined=quarantined), past, False
    from gpuboot.k8s import labels as L
    from gpuboot.k8s import ownership
    from gpuboot.k8s.client import describe

    try:
        k8s_node = cluster.read_node(api, name)
    except (api.api_error, *api.transport_errors, ValueError) as exc:
        if getattr(exc, "status", None) == 404:
            return LD.Facts(quarantined=quarantined), past, False
        return LD.Facts(unreadable=describe(exc, api)), past, True
    labels = cluster.meta(k8s_node, "labels")
    facts = LD.Facts(
        quarantined=quarantined
        or labels.get(L.LABEL_STATE) == L.STATE_QUARANTINED
        or labels.get(L.LABEL_ACTION) == L.QUARANTINE_RMA,
        foreign=ownership.foreign_marker(k8s_node),
        cancelled=None if critical(node) else _cancel(k8s_node, cooldown_s),
    )
    return facts, record.merged(past, record.past_of_node(k8s_node)), True


def _cancel(k8s_node: dict[str, Any], cooldown_s: int) -> str | None:
    """A human undid gpuboot's take-out, now or within the cool-down after it (the gate
    stamped the time): gpuboot leaves the node alone unless its fault is critical."""
    from gpuboot.k8s import labels as L
    from gpuboot.k8s import ownership

    if undone := ownership.cancelled(k8s_node):
        return undone
    raw = cluster.meta(k8s_node, "annotations").get(L.ANNOTATION_CANCELLED_AT)
    try:
        since = float(raw) if raw is not None else None
    except ValueError:
        return None
    if since is None or since + cooldown_s <= time.time():
        return None
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since + cooldown_s))
    return f"a human cancelled gpuboot's take-out; cool-down until {until}"
