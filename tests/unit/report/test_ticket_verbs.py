"""--format markdown on scan and status, and the fleet line scan prints in text: what an
operator pastes into a ticket after a scheduled scan or from the fleet's status."""

from __future__ import annotations

import json

from gpuboot import certify, cli
from gpuboot.results import RunReport

INVENTORY = (
    "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, nvidia_driver_branch: '550',"
    " nvidia_driver_version: 550.54.15-1}\n  hosts:\n    n1: {ansible_host: 127.0.0.1}\n"
    "    n2: {ansible_host: 127.0.0.1}\n"
)
NVL = "; ".join(f"GPU 1 link {i}: crc_errors=57, replay_errors=12" for i in range(18))


def _scan(tmp_path, monkeypatch, *flags: str) -> str:
    inv = tmp_path / "inv.yml"
    inv.write_text(INVENTORY)
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    finding = {"rule": "NVL-002", "title": "NVLink errors", "status": "WARN", "reason": NVL,
               "action": "watch the counters", "severity": "WARN"}  # fmt: skip
    nodes = [
        {"host": "n1", "verdict": "WARN", "findings": [finding], "measurements": []},
        {"host": "n2", "verdict": "PASS", "findings": [], "measurements": []},
    ]
    report = {"run_id": "r", "run_dir": str(tmp_path / "run"), "nodes": nodes}
    monkeypatch.setattr(certify, "certify", lambda *_a, **_k: RunReport.from_dict(report))
    argv = ["scan", "-i", str(inv), "--history", str(tmp_path / "h.jsonl"), *flags]
    assert cli.main(argv) == 0  # a WARN is no failure
    return str(inv)


def test_scan_text_ends_its_summary_with_the_fleet_line_and_folds_the_reason(
    tmp_path, monkeypatch, capsys
):
    _scan(tmp_path, monkeypatch)
    out = capsys.readouterr().out
    assert "2 nodes: 1 PASS, 1 WARN — n1 NVL-002" in out.splitlines()
    assert "GPU 1 links 0-17: crc_errors 57, replay_errors 12" in out
    assert "GPU 1 link 3: " not in out  # the 18 parts are one
    assert "n1 (first scan): " in out  # the drift lines, as before


def test_scan_as_markdown_puts_the_drift_in_the_nodes_block(tmp_path, monkeypatch, capsys):
    _scan(tmp_path, monkeypatch, "--format", "markdown")
    md = capsys.readouterr().out
    assert md.startswith("**gpuboot scan**: 2 nodes: 1 PASS, 1 WARN — n1 NVL-002")
    block = md[md.index("#### n1: WARN") :].split("\n\n")[0].splitlines()
    assert "- drift: first scan" in block
    assert "- action: watch the counters" in block
    assert "n1 (first scan): " not in md  # not told twice


def test_status_as_markdown_is_a_table(tmp_path, guard, capsys):
    home = tmp_path / "home"
    home.mkdir()
    rec = {"time": "2026-11-24T09:00:00Z", "run_id": "r", "host": "node1", "verdict": "FAIL",
           "failing": {"NVL-001": "FAIL"}, "new": ["NVL-001"]}  # fmt: skip
    (home / "scan-history.jsonl").write_text(json.dumps(rec) + "\n")
    assert cli.main(["status", "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| node | last certify | certificate |")
    assert (
        lines[2].startswith("| node1 | never certified |") and "NVL-001 (new: NVL-001)" in lines[2]
    )
