"""Trends through `gpuboot scan`: the scan history keeps each node's counters, and a counter
growing across scans of one boot turns the node WARN (TRD-001 naming the rate), never FAIL;
a reboot between scans starts the window afresh; compaction keeps the window."""

from __future__ import annotations

import json
import time

import pytest

from gpuboot import certify, scan
from gpuboot.bundle.names import BOOT_ID_FILE, META, NVLINK_ERRORS_FILE
from gpuboot.results import RunReport
from tests.unit.test_trends import nvlink_e


@pytest.fixture
def scans(tmp_path, monkeypatch):
    """scan.scan over one canned node whose bundle holds `nvidia-smi nvlink -e` and its boot
    id, an hour after the previous scan."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    count = iter(range(100))
    gmtime = time.gmtime

    def do(boot: str, crc: int, *, measured: dict | None = None) -> scan.ScanResult:
        n = next(count)
        host_dir = tmp_path / f"bundle{n}" / "n1"
        host_dir.mkdir(parents=True)
        (host_dir / NVLINK_ERRORS_FILE).write_text(nvlink_e({(3, 5): crc}, gpus=8))
        (host_dir / BOOT_ID_FILE).write_text(boot + "\n")
        (host_dir / META).write_text(json.dumps({"host": "n1", "profile": "hgx-h100-sxm-8gpu"}))
        finding = {"rule": "GPU-001", "title": "t", "status": "PASS", "reason": "ok",
                   "action": "", "severity": "FAIL"}  # fmt: skip
        node = {"host": "n1", "verdict": "PASS", "findings": [finding], "measurements": []}
        if measured:
            node["measurements"] = [measured]
        report = {"run_id": f"r{n}", "run_dir": str(tmp_path), "bundle": str(host_dir.parent),
                  "nodes": [node]}  # fmt: skip
        monkeypatch.setattr(certify, "certify", lambda *_a, **_k: RunReport.from_dict(report))
        at = 1795766400 + 3600 * n  # 2026-11-27T08:00:00Z + n hours
        monkeypatch.setattr(time, "gmtime", lambda *a: gmtime(*a) if a else gmtime(at))
        return scan.scan(str(tmp_path / "inv.yml"), history=tmp_path / "h.jsonl")

    return do


def trd(result: scan.ScanResult, rule: str = "TRD-001"):
    node = result.report.nodes[0]
    return node, next(f for f in node.findings if f.rule == rule)


def test_crc_growth_across_three_scans_warns_with_the_rate_and_never_fails(scans):
    scans("b1", 0)
    node, f = trd(scans("b1", 1240))
    assert f.status == "SKIPPED" and node.verdict == "PASS"  # 2 scans: not judged yet
    third = scans("b1", 2480)
    node, f = trd(third)
    assert node.verdict == "WARN" and f.status == "WARN"
    assert f.reason == (
        "NVLink CRC errors on GPU3 link 5 grew 1,240/h over 3 scans (2 h), threshold 100/h"
    )
    assert third.passed and third.exit_code() == 0  # a WARN node stays in service
    doc = third.to_dict()["nodes"][0]
    assert {"rule": "TRD-001", "status": "WARN"}.items() <= doc["findings"][-1].items()


def test_a_reboot_between_the_scans_is_not_growth(scans):
    scans("b1", 0)
    scans("b1", 1240)
    node, f = trd(scans("b2", 2480))  # rebooted: a new boot's first reading
    assert f.status == "SKIPPED" and node.verdict == "PASS"


def test_the_history_keeps_the_counters_and_compaction_keeps_the_window(scans, tmp_path):
    scans("b1", 0)
    scans("b1", 1240)
    history = tmp_path / "h.jsonl"
    rec = json.loads(history.read_text().splitlines()[-1])
    assert rec["counters"]["values"] == {"nvlink_crc_errors@GPU3 link 5": 1240}
    assert "nvlink@GPU0" in rec["counters"]["read"]
    scan.compact_history(history)
    state = json.loads(history.read_text().splitlines()[-1])["state"]
    assert len(state["trends"]["samples"]) == 2
    _node, f = trd(scans("b1", 2480))  # the third scan reads the compacted window
    assert f.status == "WARN" and "over 3 scans" in f.reason


def test_a_compacted_window_that_is_not_one_is_a_bad_line(scans, tmp_path):
    scans("b1", 0)
    history = tmp_path / "h.jsonl"
    scan.compact_history(history)
    lines = history.read_text().splitlines()
    rec = json.loads(lines[-1])
    rec["state"]["trends"]["samples"] = "many"
    history.write_text("\n".join([*lines[:-1], json.dumps(rec)]) + "\n")
    warnings: list[str] = []
    assert scan.read_history(history, warn=warnings.append) == {}
    assert "trend 'samples'" in warnings[0]


def test_a_counter_measurement_is_no_figure_of_the_trend_page(scans, tmp_path):
    counter = {"kind": "counter", "device": "eth2",
               "counter": "rx_pause_frames", "value": 7, "unit": "frames"}  # fmt: skip
    scans("b1", 0, measured=counter)
    rec = json.loads((tmp_path / "h.jsonl").read_text().splitlines()[-1])
    assert rec["figures"] == {}
    assert rec["counters"]["values"]["rx_pause_frames@eth2"] == 7


def test_a_warn_node_stays_warn_on_the_trend_page_after_compaction():
    from pathlib import Path

    from gpuboot.report import trend

    verdicts = ("PASS", "WARN", "WARN", "PASS")
    lines = [
        json.dumps({"time": f"2026-11-27T0{h}:00:00Z", "host": "n1", "verdict": v, "failing": {}})
        for h, v in enumerate(verdicts)
    ]
    raw = scan.History.parse("\n".join(lines).encode(), Path("h"), lambda _m: None)
    compacted = scan.History.parse(raw.compacted(), Path("h"), lambda _m: None)
    heat = trend.heat(compacted.trend.records())
    assert heat == trend.heat(raw.trend.records())
    assert heat["rows"] == [("n1", list(verdicts))]
