"""`gpuboot certify --calibrate`: a site baseline from the nodes' own measurements.

Published figures do not fit every variant (a different CPU, BIOS or PCIe switch
moves the numbers). The baseline is the median over nodes whose hardware state is
healthy (every non-bandwidth check passed), keeping the profile's relative band
widths; it is written as a `gpuboot_thresholds` group variable the operator reviews
and commits.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from gpuboot.results import NodeReport, RunReport
from gpuboot.verdict import Status

BANDWIDTH_RULE_PREFIX = "BW-"


def _hardware_healthy(node: NodeReport) -> bool:
    # a check the SKU skips (no NVLink on a PCIe card) is no sign of bad health
    return all(
        f.status in (Status.PASS, Status.SKIPPED)
        for f in node.findings
        if not f.rule.startswith(BANDWIDTH_RULE_PREFIX)
    )


def calibrate(report: RunReport, *, min_nodes: int = 3) -> dict[str, Any]:
    """Per figure: expected = median of healthy nodes, warn/fail at the profile's fractions."""
    healthy = [n for n in report.nodes if _hardware_healthy(n)]
    values: dict[str, list[float]] = {}
    fractions: dict[str, tuple[float, float]] = {}
    for node in healthy:
        for m in node.measurements:
            if m.get("value") is None or not m.get("expected"):
                continue
            values.setdefault(m["name"], []).append(float(m["value"]))
            fractions[m["name"]] = (
                m["warn_below"] / m["expected"],
                m["fail_below"] / m["expected"],
            )
    thresholds: dict[str, dict[str, float]] = {}
    skipped: dict[str, str] = {}
    evidence: dict[str, dict[str, Any]] = {}
    for figure, vals in sorted(values.items()):
        if len(vals) < min_nodes:
            skipped[figure] = f"only {len(vals)} healthy node(s) measured it, need {min_nodes}"
            continue
        mid = median(vals)
        warn_f, fail_f = fractions[figure]
        thresholds[figure] = {
            "expected": round(mid, 2),
            "warn_below": round(mid * warn_f, 2),
            "fail_below": round(mid * fail_f, 2),
        }
        evidence[figure] = {
            "nodes": len(vals),
            "min": min(vals),
            "max": max(vals),
            "below_warn": sum(v < mid * warn_f for v in vals),
        }
    return {
        "gpuboot_thresholds": thresholds,
        "based_on": evidence,
        "skipped": skipped,
        "healthy_nodes": [n.host for n in healthy],
        "excluded_nodes": [n.host for n in report.nodes if n not in healthy],
    }
