"""The fleet trend page from scan history: failing nodes per rule over time (a node keeps
its last scan's state under --limit, a harness ERROR keeps its last known state) and each
bandwidth figure's median and 10th-90th percentile band over time; `gpuboot report trend`
writes it, and every scan writes it beside its report."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpuboot import certify, cli
from gpuboot.report import trend
from gpuboot.results import RunReport


def _rec(time, host, failing, figures=None):
    return {"time": time, "host": host, "verdict": "FAIL" if failing else "PASS",
            "failing": failing, "figures": figures or {}}  # fmt: skip


ERR = {"NVL-001": "ERROR", "XID-001": "ERROR"}  # an unreachable node: every rule ERROR
HISTORY = [
    _rec("2026-11-20T10:00:00Z", "node1", {"NVL-001": "FAIL"}),
    _rec("2026-11-20T10:00:00Z", "node2", {}),
    _rec("2026-11-20T11:00:00Z", "node2", {"NVL-001": "FAIL"}),  # scan --limit node2
    _rec("2026-11-20T12:00:00Z", "node1", ERR),  # ssh blip: still failing as far as known
    _rec("2026-11-20T12:00:00Z", "node2", {}),
    _rec("2026-11-20T13:00:00Z", "node1", {}, {"nvbandwidth_h2d": [50.0, "GB/s", 40.0]}),
    _rec("2026-11-20T13:00:00Z", "node2", {}, {"nvbandwidth_h2d": [54.0, "GB/s", 40.0]}),
    _rec("2026-11-20T13:00:00Z", "node3", {}, {"nvbandwidth_h2d": [30.0, "GB/s", 40.0]}),
]


def test_failing_nodes_per_rule_carry_each_nodes_last_known_state():
    data = trend.series(HISTORY)
    assert len(data["times"]) == 4 and data["nodes"] == [2, 2, 2, 3]
    assert data["rules"] == {"NVL-001": [1, 2, 1, 0]}  # never 0 because node1 was unreachable


def test_each_figure_has_its_median_and_band_per_measuring_scan():
    ((key, points),) = trend.series(HISTORY)["figures"].items()
    assert key == ("nvbandwidth_h2d", "GB/s")
    ((_t, median, p10, p90, fail, n),) = points
    assert (median, fail, n) == (50.0, 40.0, 3) and p10 < 50.0 < p90 <= 54.0


def test_the_page_has_a_chart_per_rule_and_per_figure_and_escapes_names():
    hostile = _rec("2026-11-20T14:00:00Z", "node9", {"<b>X</b>": "FAIL"})
    page = trend.render([*HISTORY, hostile], source="h.jsonl")
    assert page.count("<svg") == 3 and "<b>X</b>" not in page and "&lt;b&gt;X&lt;/b&gt;" in page
    assert "NVL-001: 0 of 4 nodes now, at most 2" in page
    assert "nvbandwidth_h2d: median 50 GB/s at the last measuring scan (3 nodes)" in page
    assert re.search(r"<polyline[^>]*stroke=", page) and "<script" not in page


def test_report_trend_writes_the_page_from_the_history(tmp_path, capsys):
    history = tmp_path / "h.jsonl"
    history.write_text("".join(json.dumps(r) + "\n" for r in HISTORY))
    out = tmp_path / "trend.html"
    argv = ["report", "trend", "--history", str(history), "-o", str(out), "--json"]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["trend"] == str(out)
    assert "Failing nodes per rule over time" in out.read_text()


def test_every_scan_writes_the_trend_page_beside_its_report(tmp_path, monkeypatch, capsys):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, nvidia_driver_branch: '550',"
        " nvidia_driver_version: 550.54.15-1}\n  hosts:\n    n1: {ansible_host: 127.0.0.1}\n"
    )
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    finding = {"rule": "NVL-001", "title": "NVLink", "status": "FAIL", "reason": "link 3 down",
               "action": "a", "severity": "FAIL"}  # fmt: skip
    node = {"host": "n1", "verdict": "FAIL", "findings": [finding], "measurements": []}
    report = {"run_id": "r", "run_dir": str(tmp_path / "run"), "nodes": [node]}
    monkeypatch.setattr(certify, "certify", lambda *_a, **_k: RunReport.from_dict(report))
    cli.main(["scan", "-i", str(inv), "--json", "--history", str(tmp_path / "h.jsonl")])
    doc = json.loads(capsys.readouterr().out)
    page = Path(doc["reports"]["trend"]).read_text()
    assert doc["reports"]["trend"].endswith("reports/trend.html") and "NVL-001: 1 of 1" in page
