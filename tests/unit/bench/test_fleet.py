"""bench/fleet.py's pure parts: what a verb's --json says, the shards' bytes, the fit, the
projection and its targets, and the report."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "fleet.py"


@pytest.fixture(scope="module")
def fleet():
    spec = importlib.util.spec_from_file_location("bench_fleet", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules["bench_fleet"]


def run(fleet, verb, wall, cpu, ping=2.0, exit=0, **kw):
    return fleet.Run(verb, wall, cpu, exit, ping, 0.5, **kw)


def test_parse_result_counts_hosts_by_executor_and_controller(fleet):
    install = {
        "run_dir": "/runs/r1",
        "hosts": {"n1": {"executor": "exec-a"}, "n2": {"executor": "exec-a"}, "n3": {}},
    }
    assert fleet.parse_result(install) == ({"controller": 1, "exec-a": 2}, Path("/runs/r1"))
    scan = {"run_dir": None, "nodes": [{"host": "n1", "executor": "exec-b"}]}
    assert fleet.parse_result(scan) == ({"exec-b": 1}, None)
    assert fleet.parse_result({}) == ({}, None)


def test_shard_bytes_sums_every_file_and_the_journals(fleet, tmp_path):
    shard = tmp_path / "shards" / "exec-a-1"
    (shard / "artifacts").mkdir(parents=True)
    (shard / "journal.jsonl").write_bytes(b"x" * 100)
    (shard / "artifacts" / "rc").write_bytes(b"0")
    (tmp_path / "results.json").write_bytes(b"y" * 1000)  # not the stream
    assert fleet.shard_bytes(tmp_path) == (101, 100)
    assert fleet.shard_bytes(tmp_path / "none") == (0, 0)
    assert fleet.shard_bytes(None) == (0, 0)


def test_fit_line_least_squares_and_one_point_through_origin(fleet):
    a, b = fleet.fit_line([(10, 7.0), (20, 12.0), (40, 22.0)])
    assert a == pytest.approx(2.0) and b == pytest.approx(0.5)
    assert fleet.fit_line([(10, 5.0)]) == (0.0, 0.5)
    with pytest.raises(ValueError):
        fleet.fit_line([])


def runs_at(fleet, sizes):
    """Direct: 1 s fixed + 0.3 s/node CPU; executors: 1.4 s fixed + 0.05 s/node."""
    out = {}
    for n in sizes:
        direct = {v: run(fleet, v, 2.0 + 0.1 * n, 1.0 + 0.3 * n) for v in fleet.VERBS}
        routed = {v: run(fleet, v, 3.0 + 0.2 * n / 2, 1.4 + 0.05 * n) for v in fleet.VERBS}
        out[n] = {"direct": direct, "executors": routed}
    return out


def test_projection_follows_the_model(fleet):
    line = fleet.fits(runs_at(fleet, (10, 20, 40)))["scan"]
    direct = fleet.project(line, 1000, 0, cores=2)
    assert direct["cpu_s"] == pytest.approx(301.0)
    assert direct["wall_s"] == pytest.approx(301.0 / 2)  # the controller's CPU bounds it
    # each executor's fixed cost: (1.4 - 1.0) / 2 per executor
    routed = fleet.project(line, 1000, 8, cores=2)
    assert routed["cpu_s"] == pytest.approx(1.0 + 0.2 * 8 + 50.0)
    assert routed["wall_s"] == pytest.approx(3.0 + 0.2 * 1000 / 8)


def test_projection_without_an_executor_run_is_none(fleet):
    runs = runs_at(fleet, (10,))
    del runs[10]["executors"]
    line = fleet.fits(runs)["install_first"]
    assert fleet.project(line, 1024, 2) is None
    assert fleet.project(line, 1024, 0)["cpu_s"] == pytest.approx(1024 * 0.4)


def test_a_refused_verb_is_left_out_of_the_fit(fleet):
    runs = runs_at(fleet, (10, 20))
    for n in (10, 20):
        runs[n]["executors"]["certify_quick"] = run(fleet, "certify_quick", 1.0, 0.5, exit=2)
    line = fleet.fits(runs)["certify_quick"]
    assert "executors" not in line and "direct" in line


def test_targets_met_and_not_met(fleet):
    runs = runs_at(fleet, (10, 40))
    rows = {t["target"]: t for t in fleet.targets(runs)}
    cpu = rows["40 nodes, scan: CPU/node through 2 executors <= 1/3 direct"]
    assert cpu["met"]  # 3.4 / 13.0
    assert not rows["10 nodes, scan: CPU/node through 2 executors <= 1/3 direct"]["met"]
    # direct at the largest size: scan 6 s against ping 2 s
    assert not rows["direct, 40 nodes: scan <= 1.5x ping"]["met"]
    runs[40]["direct"]["install_noop"] = run(fleet, "install_noop", 2.5, 1.0)
    rows = {t["target"]: t for t in fleet.targets(runs)}
    assert rows["direct, 40 nodes: install_noop <= 1.3x ping"]["met"]


def test_report_shows_table_targets_model_and_projection(fleet):
    runs = runs_at(fleet, (10, 20))
    runs[10]["executors"]["certify_quick"] = run(
        fleet, "certify_quick", 1.0, 0.5, exit=2, note="pair probes do not run"
    )
    runs[10]["executors"]["scan"].executors = {"exec-a": 5, "exec-b": 5}
    runs[10]["executors"]["scan"].stream_bytes = 50_000
    doc = {"started": "2026-11-27 17:00", "stack": "s", "cores": 2, "load_at_start": 6.1}
    text = fleet.report_text(doc, runs)
    assert "load (1 min) at start 6.1" in text
    assert "exit 2, not measured: pair probes do not run" in text
    scan_row = next(line for line in text.splitlines() if "executors scan" in line)
    assert "5000" in scan_row and "exec-a 5, exec-b 5" in scan_row
    assert "NOT met" in text and "C_e(N, E)" in text
    assert any(line.split()[:2] == ["scan", "10000"] for line in text.splitlines())
    js = fleet.report_doc(doc, runs)
    assert js["runs"]["10"]["executors"]["certify_quick"]["exit"] == 2
    assert set(js["projection"]["scan"]["1024"]) == {"0", "2", "8", "32"}


def test_nodes_in_error_make_a_run_no_measurement(fleet):
    reason = "cannot judge: node1: the collection answer arrived without its begin or end line"
    doc = {
        "nodes": [
            {"host": "node1", "verdict": "ERROR", "findings": [{"rule": "X", "reason": reason}]},
            {"host": "node2", "verdict": "ERROR", "findings": []},
            {"host": "node3", "verdict": "PASS", "findings": []},
        ]
    }
    note = fleet.harness_errors(doc)
    assert note == f"2 nodes ERROR (harness): {reason}"
    assert fleet.harness_errors({"nodes": [{"verdict": "FAIL"}]}) == ""
    assert fleet.harness_errors({"hosts": {"n1": {"status": "ok"}}}) == ""
    assert not run(fleet, "certify_quick", 20.0, 1.0, exit=1, note=note).measured
    assert run(fleet, "certify_quick", 20.0, 1.0, exit=1).measured  # a node failed: judged


def test_earlier_runs_read_back_and_merged_this_run_wins(fleet):
    earlier = runs_at(fleet, (10,))
    doc = {"started": "t", "stack": "s", "cores": 2, "load_at_start": 1.0}
    read = fleet.runs_from_doc(fleet.report_doc(doc, earlier))
    assert read[10]["executors"]["scan"] == earlier[10]["executors"]["scan"]
    now = {10: {"direct": {"scan": run(fleet, "scan", 99.0, 9.0)}}, 40: runs_at(fleet, (40,))[40]}
    merged = fleet.merge(now, read)
    assert merged[10]["direct"]["scan"].wall_s == 99.0  # measured now
    assert merged[10]["executors"]["scan"] == earlier[10]["executors"]["scan"]
    assert sorted(merged) == [10, 40]
