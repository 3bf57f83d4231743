"""Scan exit codes a scheduler can act on, and a harness ERROR that is never drift:
0 nothing failing, 1 new drift, 4 not judged (nothing new), 5 still failing (nothing new)."""

from __future__ import annotations

import pytest

from gpuboot import certify, cli, engine, scan
from gpuboot.node_collect import HostUnreachable
from gpuboot.results import RunReport


def _finding(rule: str, status: str) -> dict:
    return {"rule": rule, "title": rule, "status": status, "reason": "r", "action": "a",
            "severity": "FAIL", "applicable": True}  # fmt: skip


def _node(host: str, failing: dict[str, str]) -> dict:
    findings = [_finding(r, s) for r, s in failing.items()] + [_finding("GPU-002", "PASS")]
    verdict = "FAIL" if "FAIL" in failing.values() else "ERROR" if failing else "PASS"
    return {"host": host, "verdict": verdict, "findings": findings, "measurements": []}


def _unreachable(host: str) -> dict:
    return engine.unjudged(host, HostUnreachable("unreachable: ssh timed out")).to_dict()


@pytest.fixture
def run(tmp_path, monkeypatch):
    """scan.scan over canned node reports (no host): one call per scan."""
    history = tmp_path / "history.jsonl"

    def do(*nodes: dict) -> dict:
        report = {"run_id": "r", "run_dir": str(tmp_path), "nodes": list(nodes)}
        monkeypatch.setattr(certify, "certify", lambda *_a, **_k: RunReport.from_dict(report))
        return scan.scan(str(tmp_path / "inv.yml"), history=history).to_dict()

    return do


def test_a_clean_scan_exits_0(run):
    assert run(_node("n1", {}))["exit_code"] == 0


def test_first_failures_are_new_drift_exit_1_then_still_failing_exit_5(run):
    first = run(_node("n1", {"NVL-001": "FAIL"}))
    assert first["exit_code"] == 1 and first["nodes"][0]["drift"]["new"] == ["NVL-001"]
    again = run(_node("n1", {"NVL-001": "FAIL"}))
    assert again["exit_code"] == 5 and again["nodes"][0]["drift"]["still"] == ["NVL-001"]
    worse = run(_node("n1", {"NVL-001": "FAIL", "XID-001": "FAIL"}))
    assert worse["exit_code"] == 1 and worse["nodes"][0]["drift"]["new"] == ["XID-001"]


def test_an_unreachable_node_is_neither_new_nor_cleared_drift(run):
    run(_node("n1", {"NVL-001": "FAIL"}))
    blip = run(_unreachable("n1"))
    d = blip["nodes"][0]["drift"]
    assert (d["new"], d["still"], d["cleared"]) == ([], [], [])
    assert "NVL-001" in blip["nodes"][0]["unjudged"] and blip["exit_code"] == 4
    back = run(_node("n1", {"NVL-001": "FAIL"}))  # still the same fault: not new again
    d = back["nodes"][0]["drift"]
    assert (d["new"], d["still"], d["cleared"]) == ([], ["NVL-001"], [])
    assert back["exit_code"] == 5


def test_a_rule_error_neither_clears_nor_creates_drift(run):
    run(_node("n1", {"NVL-001": "FAIL"}))
    d = run(_node("n1", {"NVL-001": "ERROR", "ECC-003": "ERROR"}))["nodes"][0]["drift"]
    assert d["cleared"] == [] and d["new"] == []
    d = run(_node("n1", {}))["nodes"][0]["drift"]  # judged again and passing: now cleared
    assert d["cleared"] == ["NVL-001"]


def test_new_drift_outranks_not_judged_which_outranks_still_failing(run):
    run(_node("n1", {"NVL-001": "FAIL"}), _node("n2", {}), _node("n3", {}))
    mixed = run(_node("n1", {"NVL-001": "FAIL"}), _unreachable("n2"), _node("n3", {}))
    assert mixed["exit_code"] == 4
    worst = run(
        _node("n1", {"NVL-001": "FAIL"}), _unreachable("n2"), _node("n3", {"XID-001": "FAIL"})
    )
    assert worst["exit_code"] == 1


def test_the_cli_exits_with_the_scan_code_and_help_documents_it(tmp_path, monkeypatch, capsys):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, nvidia_driver_branch: '550',"
        " nvidia_driver_version: 550.54.15-1}\n  hosts:\n    n1: {ansible_host: 127.0.0.1}\n"
    )
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    report = {"run_id": "r", "run_dir": str(tmp_path), "nodes": [_node("n1", {"NVL-001": "FAIL"})]}
    monkeypatch.setattr(certify, "certify", lambda *_a, **_k: RunReport.from_dict(report))
    argv = ["scan", "-i", str(inv), "-q", "--history", str(tmp_path / "h.jsonl")]
    assert cli.main(argv) == 1  # first scan: the failure is new
    assert cli.main(argv) == 5  # the same failure an hour later: nothing new
    assert "still: NVL-001" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["scan", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "5 still failing" in helptext and "4 nothing new, but a node" in helptext
