"""A synthetic 300-node certify report, shaped as gpuboot.engine writes one (a node's
measurements carry the rule that judged them), for the report-at-scale tests and the
browser test. Deterministic: no randomness, the same report every time."""

from __future__ import annotations

from typing import Any

from .sample import BASE_RULES

SIZE = 300
RULES = BASE_RULES
# rule, figure, unit, (healthy, warn below, fail below, physical limit)
FIGURES = [
    ("BW-001", "nvbandwidth_h2d", "GB/s", (55.0, 50.0, 40.0, 63.0)),
    ("BW-003", "nvbandwidth_d2d", "GB/s", (390.0, 350.0, 300.0, 450.0)),
    ("BW-005", "ib_write_bw", "Gb/s", (392.0, 380.0, 350.0, 400.0)),
]
NVLINK_DOWN = ["node42", "node7", "node260"]
PCIE_GEN3 = ["node13"]
SLOW_H2D = ["node250", "node100"]  # BW-001 FAIL: a measurement and its finding
HARNESS = ["node10", "node2"]  # ERROR: probe tool missing, nothing measured
WARNED = ["node55"]  # GPU-002 WARN
FAILING = sorted(NVLINK_DOWN + PCIE_GEN3 + SLOW_H2D + HARNESS)  # FAIL or ERROR nodes
ODD_NAME = 'node77"\\x'  # a host name that must be escaped in HTML and in label values


def _finding(rule: str, title: str, status: str = "PASS", reason: str = "ok") -> dict[str, Any]:
    action = "" if status == "PASS" else f"fix {rule} and certify again"
    return {"rule": rule, "title": title, "status": status, "reason": reason, "action": action}


def _node(i: int) -> dict[str, Any]:
    host = ODD_NAME if i == 77 else f"node{i}"
    findings = [_finding(r, t) for r, t in RULES]
    by_rule = {f["rule"]: f for f in findings}
    measurements = []
    verdict = "PASS"
    if host in HARNESS:
        by_rule["STK-001"].update(status="ERROR", reason="cannot judge: nvbandwidth missing")
        verdict = "ERROR"
    for rule, figure, unit, (good, warn, fail, limit) in FIGURES:
        if host in HARNESS:  # an ERROR rule has no measurement: the node has no figure
            findings.append(_finding(rule, figure, "ERROR", f"cannot judge: {figure} missing"))
            continue
        value = round(good * (0.97 + (i * 37 % 61) / 1000), 2)  # a spread of a few %
        if rule == "BW-001" and host in SLOW_H2D:
            value = 12.4 + i / 100
        status = "FAIL" if value < fail else "WARN" if value < warn else "PASS"
        findings.append(_finding(rule, figure, status, f"{figure} {value:g} {unit}"))
        measurements.append(
            {
                "name": figure,
                "value": value,
                "unit": unit,
                "median_of": 5,
                "warn_below": warn,
                "fail_below": fail,
                "physical_limit": limit,
                "pct_of_limit": round(100 * value / limit, 1),
                "status": status,
                "rule": rule,
            }
        )
        verdict = "FAIL" if status == "FAIL" else verdict
    if host in NVLINK_DOWN:
        by_rule["NVL-001"].update(status="FAIL", reason="GPU 5: 12 of 18 NVLink links inactive")
        verdict = "FAIL"
    if host in PCIE_GEN3:
        by_rule["PCI-001"].update(status="FAIL", reason="GPU 2 trained at Gen3 x16")
        verdict = "FAIL"
    if host in WARNED:
        by_rule["GPU-002"].update(status="WARN", reason="persistence mode disabled on GPU 3")
        verdict = "WARN"
    return {"host": host, "verdict": verdict, "findings": findings, "measurements": measurements}


def fleet_report(size: int = SIZE) -> dict[str, Any]:
    nodes = [_node(i) for i in range(1, size + 1)]
    return {
        "run_id": "20261122T101500-certify-fleet",
        "elapsed_s": 912.5,
        "passed": False,
        "nodes": nodes,
    }


def scan_report(hosts: list[str], failing: dict[str, str]) -> dict[str, Any]:
    """A scan report over ``hosts``: ``failing`` maps host -> the rule failing there."""
    nodes = []
    for host in hosts:
        rule = failing.get(host)
        findings = [_finding(r, t, "FAIL" if r == rule else "PASS") for r, t in RULES]
        drift = {"previous_scan": None, "new": [rule] if rule else [], "still": [], "cleared": []}
        nodes.append(
            {
                "host": host,
                "verdict": "FAIL" if rule else "PASS",
                "findings": findings,
                "measurements": [],
                "drift": drift,
            }
        )
    return {"run_id": "scan", "passed": not failing, "nodes": nodes, "history": "h.jsonl"}
