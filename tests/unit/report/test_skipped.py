"""A check that did not run is SKIPPED, with its reason, everywhere: never counted as PASS."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from gpuboot.calibrate import calibrate
from gpuboot.checks import base, rules, stack_rules
from gpuboot.cli.render import verdict_text
from gpuboot.report import certificate, html, junit, prometheus
from gpuboot.results import NodeReport, RunReport

from .conftest import NOW

SKIP_REASON = "not applicable: probe level none: nvbandwidth host_to_device_memcpy_ce not run"


def _finding(rule: str, status: str = "PASS", reason: str = "ok") -> dict[str, Any]:
    return {"rule": rule, "title": f"title {rule}", "status": status, "reason": reason}


def _report(findings: list[dict[str, Any]], verdict: str = "PASS") -> dict[str, Any]:
    return {"run_id": "r", "nodes": [{"host": "gpu-a01", "verdict": verdict, "findings": findings}]}


def _mixed() -> dict[str, Any]:
    return _report(
        [_finding("GPU-001"), _finding("GPU-002"), _finding("BW-001", "SKIPPED", SKIP_REASON)]
    )


def test_not_applicable_is_skipped_not_pass_and_carries_no_action():
    rule = rules.Rule(
        "X-001", "t", base.FAIL, "reseat the GPU", lambda _e, _c: base.not_applicable("why")
    )
    f = rule.evaluate({}, rules.NodeContext("h", {}))
    assert (f.status, f.applicable, f.action) == (base.SKIPPED, False, "")
    assert "why" in f.reason


def test_stack_rules_not_applicable_are_skipped_too():
    ctx = rules.NodeContext("h", {}, hostvars={"gpuboot_os_family": "redhat"})
    assert stack_rules.check_unattended_blacklist({}, ctx).status == base.SKIPPED
    assert stack_rules.check_pinned_packages({}, rules.NodeContext("h", {})).status == base.SKIPPED


def _f(status: str) -> rules.Finding:
    return rules.Finding("X-001", "t", status, "r")


def test_verdict_ignores_skipped_but_nothing_checked_is_not_pass():
    assert rules.verdict([_f(rules.PASS), _f(base.SKIPPED)]) == rules.PASS
    assert rules.verdict([_f(rules.WARN), _f(base.SKIPPED)]) == rules.WARN
    assert rules.verdict([_f(base.SKIPPED), _f(base.SKIPPED)]) == rules.ERROR
    assert rules.verdict([]) == rules.ERROR


def test_cli_text_counts_passed_and_skipped():
    text = verdict_text(RunReport.from_dict(_mixed()))
    assert "2 passed, 1 skipped" in text
    assert "checks passed" not in text
    assert "SKIPPED BW-001" in text and SKIP_REASON in text


def test_cli_text_names_a_node_where_nothing_was_checked():
    report = _report([_finding("BW-001", "SKIPPED", SKIP_REASON)], verdict="ERROR")
    assert "nothing was checked: 1 check(s) skipped" in verdict_text(RunReport.from_dict(report))


def test_junit_skipped_element_with_reason():
    root = ET.fromstring(junit.render(RunReport.from_dict(_mixed())))
    suite = root.find("testsuite")
    case = suite.find("testcase[@name='BW-001 title BW-001']")
    assert case.find("skipped").get("message") == SKIP_REASON
    assert case.find("failure") is None and case.find("error") is None
    assert suite.get("skipped") == "1" and root.get("skipped") == "1"
    assert suite.get("tests") == "3"


def test_prometheus_rule_status_has_skipped_state():
    text = prometheus.render(RunReport.from_dict(_mixed()), now=NOW)
    assert 'gpuboot_certify_rule_status{host="gpu-a01",rule="BW-001",status="SKIPPED"} 1' in text
    assert 'gpuboot_certify_rule_status{host="gpu-a01",rule="BW-001",status="PASS"} 0' in text
    assert 'gpuboot_certify_rule_status{host="gpu-a01",rule="GPU-001",status="SKIPPED"} 0' in text
    # a node verdict is never SKIPPED: that state set keeps its four values
    assert 'gpuboot_certify_node_verdict{host="gpu-a01",verdict="SKIPPED"}' not in text


def test_html_shows_skipped_with_reason():
    page = html.render(RunReport.from_dict(_mixed()), now=NOW)
    assert "s-SKIPPED" in page and "1 skipped" in page
    assert SKIP_REASON in page


def test_certificate_records_the_skipped_check_and_its_reason(bundle, key):
    node = {**_mixed()["nodes"][0], "measurements": []}
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    bw = next(r for r in cert["rules"] if r["rule"] == "BW-001")
    assert (bw["status"], bw["reason"]) == ("SKIPPED", SKIP_REASON)


def test_calibration_counts_a_skipped_state_check_as_healthy():
    m = {"name": "nvbandwidth_h2d", "value": 50.0, "expected": 55.0}
    m.update(warn_below=49.5, fail_below=44.0)
    nodes = [
        {
            "host": h,
            "verdict": "PASS",
            "findings": [_finding("GPU-001"), _finding("NVL-001", "SKIPPED", "no NVLink")],
            "measurements": [{**m, "value": v}],
        }
        for h, v in (("a", 50.0), ("b", 51.0), ("c", 52.0))
    ]
    assert calibrate(RunReport.from_dict({"nodes": nodes}), min_nodes=3)["healthy_nodes"] == [
        "a",
        "b",
        "c",
    ]


def test_the_same_skip_on_many_nodes_is_one_line():
    from gpuboot.cli.render import verdict_text

    node = _report([_finding("GPU-001"), _finding("BW-001", "SKIPPED", SKIP_REASON)])["nodes"][0]
    nodes = [{**node, "host": f"node{i}"} for i in range(300)]
    text = verdict_text(RunReport.from_dict({"nodes": nodes}))
    assert text.count("SKIPPED BW-001") == 1
    assert "(300 nodes)" in text
    assert len(text.splitlines()) < 310  # header, one row per node, the grouped skip
