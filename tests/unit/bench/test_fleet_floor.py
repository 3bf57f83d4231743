"""bench/fleet.py's judging floor, stream split and mitogen rows, and bench/fleet_procs.py's
promise that a lab it brought up is taken down on every way out."""

from __future__ import annotations

import importlib.util
import json
import signal
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fleet():
    yield _load("bench_fleet_floor", "fleet.py")
    del sys.modules["bench_fleet_floor"]


@pytest.fixture(scope="module")
def procs():
    yield _load("bench_fleet_procs", "fleet_procs.py")
    del sys.modules["bench_fleet_procs"]


def run(fleet, verb, cpu, judge=None, **kw):
    return fleet.Run(verb, 10.0, cpu, 0, 2.0, 0.5, judge_cpu_s=judge, **kw)


def nodes(*verdicts):
    return {"nodes": [{"host": f"n{i}", "verdict": v} for i, v in enumerate(verdicts)]}


def test_judge_problem_accepts_the_same_hosts_judged_and_names_each_failure(fleet):
    assert fleet.judge_problem(nodes("PASS", "FAIL"), 1, nodes("PASS", "FAIL")) == ""
    # a node the run could not read is ERROR again: the same evidence, no new failure
    assert fleet.judge_problem(nodes("ERROR", "PASS"), 0, nodes("ERROR", "PASS")) == ""
    refused = fleet.judge_problem(nodes("PASS"), 2, {"error": "bundle gone"})
    assert refused == "evaluate exit 2: bundle gone"
    assert "judged 1 hosts, the run 2" in fleet.judge_problem(nodes("PASS", "PASS"), 0, nodes("P"))
    lost = fleet.judge_problem(nodes("PASS", "PASS"), 0, nodes("PASS", "ERROR"))
    assert lost == "evaluate found 1 nodes ERROR the run judged (n1...)"


def test_a_run_whose_judging_disagrees_has_no_floor_and_no_net(fleet):
    r = run(fleet, "scan", 4.0, judge=1.0)
    assert r.judged and r.net_cpu_s == pytest.approx(3.0)
    r.judge_note = "evaluate exit 3: broken"
    assert not r.judged and r.net_cpu_s is None
    assert run(fleet, "scan", 4.0).net_cpu_s is None  # never measured


def test_floor_above_a_third_of_direct_says_the_target_lies_below_it(fleet):
    # 10 nodes: direct 2.0 s (judging 1.0), executors 1.8 s (judging 1.2)
    direct, routed = run(fleet, "scan", 2.0, judge=1.0), run(fleet, "scan", 1.8, judge=1.2)
    floor = fleet.judging_floor(direct, routed, 10)
    assert floor["judge_s_per_node"] == pytest.approx(0.12)
    assert floor["of_direct"] == pytest.approx(0.6) and floor["below_floor"]
    assert floor["net_ratio"] == pytest.approx(0.6)  # 0.6 / 1.0
    assert floor["text"] == (
        "ratio 0.90 (target 1/3); floor: judging 0.120 s/node = 0.60 of direct; net of "
        "judging: 0.060 / 0.100 s/node = 0.60; the target lies below this floor"
    )
    cheap = fleet.judging_floor(direct, run(fleet, "scan", 0.5, judge=0.2), 10)
    assert not cheap["below_floor"] and "lies below" not in cheap["text"]
    assert fleet.judging_floor(direct, run(fleet, "scan", 1.8), 10) is None


def test_floor_net_of_judging_when_direct_is_all_judging(fleet):
    # evaluate's own reading can cost more than the verb's judging in workers
    direct, routed = run(fleet, "scan", 1.0, judge=1.2), run(fleet, "scan", 1.1, judge=1.0)
    floor = fleet.judging_floor(direct, routed, 10)
    assert floor["net_ratio"] is None and floor["text"].endswith(
        "= n/a (direct cost no more than its judging); the target lies below this floor"
    )


def test_scan_target_row_carries_its_floor_and_the_report_prints_it(fleet):
    runs = {
        10: {
            "direct": {"scan": run(fleet, "scan", 2.0, judge=1.0)},
            "executors": {"scan": run(fleet, "scan", 1.8, judge=1.2)},
        }
    }
    (row,) = fleet.targets(runs)[:1]
    assert not row["met"] and row["floor"]["below_floor"]
    doc = {"started": "t", "stack": "s", "cores": 2, "load_at_start": 1.0}
    text = fleet.report_text(doc, runs)
    assert "ratio 0.90 (target 1/3); floor: judging 0.120 s/node = 0.60 of direct" in text
    assert fleet.report_doc(doc, runs)["targets"][0]["floor"]["of_direct"] == pytest.approx(0.6)


def test_report_row_splits_journal_from_the_rest_and_shows_judge_and_net(fleet):
    r = run(fleet, "scan", 2.0, judge=0.5, stream_bytes=60_000, journal_bytes=59_000)
    row = fleet._row(10, "executors", r)
    cells = row.split()
    assert cells[:3] == ["10", "executors", "scan"]
    # CPU, judge, net per node; ping CPU; journal and the rest per host
    assert cells[6:11] == ["0.200", "0.050", "0.150", "0.050", "5900"] and cells[11] == "100"
    r.judge_note = "evaluate exit 3: broken"
    assert "(judging floor not measured: evaluate exit 3: broken)" in fleet._row(10, "direct", r)
    assert fleet._row(10, "direct", r).split()[7:9] == ["-", "-"]


def test_mitogen_is_set_against_the_same_kind_of_lab_and_kept_out_of_the_model(fleet):
    first = {"direct": 20.0, "mitogen": 12.0, "executors": 30.0, "mitogen-executors": 15.0}
    runs = {
        4: {
            mode: {"install_first": fleet.Run("install_first", wall, wall / 2, 0, 1.0, 0.1)}
            for mode, wall in first.items()
        }
    }
    assert fleet.mitogen_rows(runs) == [
        "  4 nodes, mitogen install_first: wall 12.0 / 20.0 s = 0.60x, "
        "CPU/node 1.500 / 2.500 s = 0.60x",
        "  4 nodes, mitogen-executors install_first: wall 15.0 / 30.0 s = 0.50x, "
        "CPU/node 1.875 / 3.750 s = 0.50x",
    ]
    assert set(fleet.fits(runs)["install_first"]) == {"direct", "executors"}
    doc = {"started": "t", "stack": "s", "cores": 2, "load_at_start": 1.0}
    text = fleet.report_text(doc, runs)
    assert "install with --strategy mitogen / linear (the same kind of lab):" in text


def test_an_earlier_document_without_the_floor_reads_back(fleet):
    older = {"verb": "scan", "wall_s": 1.0, "cpu_s": 1.0, "exit": 0, "ping_s": 1.0}
    older |= {"ping_cpu_s": 0.1, "executors": {}, "stream_bytes": 0, "journal_bytes": 0}
    read = fleet.runs_from_doc({"runs": {"10": {"direct": {"scan": older}}}})
    assert read[10]["direct"]["scan"].judge_cpu_s is None


def test_lab_is_taken_down_when_up_fails_and_on_ctrl_c(procs, monkeypatch):
    downs, ups = [], []

    def fake_run_all(cmds, env=None):
        ups.append(cmds[0])
        exit_code = 3 if "bad" in cmds[0] else 0
        return [procs.Timing(1.0, 0.1, exit_code, '{"inventory": "/x"}', "")]

    monkeypatch.setattr(procs, "run_all", fake_run_all)
    monkeypatch.setattr(procs, "_down", lambda _g, name: downs.append(name))
    with pytest.raises(SystemExit, match="lab up failed"), procs.lab("gpuboot", "bad", []):
        pass
    with pytest.raises(KeyboardInterrupt), procs.lab("gpuboot", "good", ["--nodes", "4"]) as t:
        assert t.json() == {"inventory": "/x"}
        raise KeyboardInterrupt
    assert downs == ["bad", "good"]
    assert ups[1][:5] == ["gpuboot", "lab", "up", "--name", "good"]


def test_lab_down_ignores_a_second_ctrl_c(procs, monkeypatch):
    seen = []
    monkeypatch.setattr(
        procs.subprocess, "run", lambda *a, **k: seen.append(signal.getsignal(signal.SIGINT))
    )
    before = signal.getsignal(signal.SIGINT)
    procs._down("gpuboot", "lab1")
    assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGINT) is before


@pytest.mark.subprocess
def test_sigterm_to_the_bench_stops_its_command_with_sigint(procs, tmp_path, monkeypatch):
    """SIGTERM ends the bench like Ctrl-C, and the running command is asked to stop the
    way gpuboot understands (SIGINT), so it can end its own run before the lab goes."""
    marker = tmp_path / "stopped"
    child = (
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGINT, lambda *_: (pathlib.Path({str(marker)!r}).write_text('"
        "int'), sys.exit(0)))\n"
        "time.sleep(60)\n"
    )
    monkeypatch.setattr(procs, "STOP_GRACE_S", 30.0)
    old = signal.getsignal(signal.SIGTERM)
    procs.stop_on_sigterm()
    try:
        signal.setitimer(signal.ITIMER_REAL, 3.0)  # the child's handler is set by then
        alarm = signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGTERM))
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            procs.timed([sys.executable, "-c", child])
        assert time.monotonic() - started < 30  # it ended on the SIGINT, not killed late
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, alarm)
        signal.signal(signal.SIGTERM, old)
    assert marker.read_text() == "int"


def test_judging_floor_is_fitted_and_projected_against_direct(fleet):
    """Judging: 0.5 s to start + 0.01 s per node; direct scan 1 s + 0.3 s per node."""
    runs = {
        n: {
            "direct": {"scan": run(fleet, "scan", 1.0 + 0.3 * n, judge=0.5 + 0.01 * n)},
            "executors": {"scan": run(fleet, "scan", 1.4 + 0.05 * n, judge=0.5 + 0.01 * n)},
        }
        for n in (10, 20)
    }
    line = fleet.fits(runs)["scan"]
    floor = fleet.floor_at(line, 1000)
    assert floor["cpu_s"] == pytest.approx(10.5)
    assert floor["of_direct"] == pytest.approx(10.5 / 301.0)
    doc = {"started": "t", "stack": "s", "cores": 2, "load_at_start": 1.0}
    assert "  scan          0.50 s + 0.0100 s/node: 1,024 nodes 11 s = 0.03" in fleet.report_text(
        doc, runs
    )
    assert fleet.report_doc(doc, runs)["judging_floor"]["scan"]["1024"]["cpu_s"] == pytest.approx(
        10.74
    )
    assert "overstated" not in fleet.report_text(doc, runs)
    one = {10: runs[10]}
    assert "(one size: its fixed start counted per node, overstated)" in fleet.report_text(doc, one)
    for n in (10, 20):  # no judging measured through executors: no floor to project
        runs[n]["executors"]["scan"].judge_cpu_s = None
    assert fleet.floor_at(fleet.fits(runs)["scan"], 1000) is None


def test_a_refusal_is_told_by_its_message_not_its_document(fleet):
    error = {"error": {"message": "executor hall-a runs other code", "hint": "executor setup"}}
    assert fleet.said(error) == "executor hall-a runs other code"
    assert fleet.judge_problem(nodes("PASS"), 2, error) == (
        "evaluate exit 2: executor hall-a runs other code"
    )
    assert fleet.said({"error": "plain"}) == "plain" and fleet.said({}) == ""


def test_every_judged_verb_measured_both_ways_gets_a_floor_line(fleet):
    runs = {
        4: {
            "direct": {v: run(fleet, v, 2.0, judge=1.0) for v in fleet.JUDGED},
            "executors": {v: run(fleet, v, 1.8, judge=1.2) for v in fleet.JUDGED},
        }
    }
    runs[4]["executors"]["scan"].exit = 2  # refused: no floor to show
    rows = fleet.floor_rows(runs)
    named = [r.split(":")[0].strip() for r in rows]
    assert named == ["4 nodes, certify_none", "4 nodes, certify_quick"]
    doc = {"started": "t", "stack": "s", "cores": 2, "load_at_start": 1.0}
    assert rows[0] in fleet.report_text(doc, runs).splitlines()


def test_a_failed_executor_setup_is_told_by_its_executors_reasons(fleet, procs):
    doc = {"executors": {"hall-a": {"status": "failed", "reason": "other code"}, "hall-b": {}}}
    t = procs.Timing(1.0, 0.1, 1, json.dumps(doc), "")
    assert fleet._why(t) == "hall-a: other code"


def test_a_wall_target_names_the_floor_of_the_machines_busy_cores(fleet, monkeypatch):
    """The lab's nodes share the controller's cores: a wall near busy / cores was the
    machine's work, which no controller change removes."""
    monkeypatch.setattr(fleet.os, "cpu_count", lambda: 2)
    scan = fleet.Run("scan", 24.0, 6.0, 0, 7.0, 1.0)
    scan.busy_s = 44.0
    runs = {40: {"direct": {"scan": scan}}}
    (row,) = fleet.targets(runs)
    assert not row["met"] and row["floor"]["wall_floor_s"] == 22.0
    assert (
        "busy 44.0 s (nodes and controller) = 22.0 s of wall = 3.14x ping" in (row["floor"]["text"])
    )
    assert "the wall was 1.09x that floor" in row["floor"]["text"]


def test_the_scan_target_row_splits_reaching_the_nodes_from_the_rest(fleet):
    direct = run(fleet, "scan", 6.0, reach_cpu_s=3.6)
    routed = run(fleet, "scan", 3.0, reach_cpu_s=0.6)
    runs = {10: {"direct": {"scan": direct}, "executors": {"scan": routed}}}
    (row,) = fleet.targets(runs)[:1]
    assert not row["met"]  # the whole verb: 3.0 / 6.0
    assert row["reach"]["met"] and row["reach"]["ratio"] == pytest.approx(1 / 6)
    assert row["reach"]["rest_s_per_node"] == pytest.approx({"direct": 0.24, "executors": 0.24})
    doc = {"started": "t", "stack": "s", "cores": 2, "load_at_start": 1.0}
    assert (
        "reaching the nodes: 0.060 / 0.360 s/node = 0.17 (<= 1/3); the rest, the "
        "controller's either way: 0.240 / 0.240 s/node" in fleet.report_text(doc, runs)
    )
    # a report that does not tell its reach (an older gpuboot): no split, never a guess
    routed.reach_cpu_s = None
    assert "reach" not in fleet.targets(runs)[0]
    assert fleet.runs_from_doc(fleet.report_doc(doc, runs))[10]["direct"]["scan"].reach_cpu_s == 3.6


def test_the_rest_alone_above_a_third_of_direct_puts_the_target_below_it(fleet):
    # direct 6.0 s (reach 3.6); through executors 3.0 s, of which 0.6 s reaching
    direct = run(fleet, "scan", 6.0, reach_cpu_s=3.6)
    routed = run(fleet, "scan", 3.0, reach_cpu_s=0.6)
    split = fleet.reach_split(direct, routed, 10)
    assert split["rest_of_direct"] == pytest.approx(0.4) and split["below_floor"]
    assert split["text"].endswith("= 0.40 of direct; the target lies below it")
    # the rest at a quarter of direct: the target is above the floor, and not said below
    routed = run(fleet, "scan", 2.1, reach_cpu_s=0.6)
    split = fleet.reach_split(direct, routed, 10)
    assert split["rest_of_direct"] == pytest.approx(0.25) and not split["below_floor"]
    assert "below" not in split["text"]


def _sized(fleet, sizes, routed_fixed, routed_per_node):
    """Direct: 1 s fixed + 0.3 s/node; executors as given (CPU s), at ``sizes``."""
    return {
        n: {
            "direct": {"scan": run(fleet, "scan", 1.0 + 0.3 * n)},
            "executors": {"scan": run(fleet, "scan", routed_fixed + routed_per_node * n)},
        }
        for n in sizes
    }


def test_the_fleet_target_is_projected_from_two_sizes_and_never_from_one(fleet):
    # a large fixed start through executors fails the target at 10 and 20 nodes, and the
    # fleet's size, where the fixed start is spread over 1,024 nodes, meets it
    runs = _sized(fleet, (10, 20), 4.0, 0.05)
    rows = {t["target"]: t for t in fleet.targets(runs)}
    assert not rows["20 nodes, scan: CPU/node through 2 executors <= 1/3 direct"]["met"]
    fleet_row = rows["1,024 nodes projected, scan: CPU/node through 2 executors <= 1/3 direct"]
    assert fleet_row["met"] and fleet_row["projected"]
    # direct 1 + 307.2; through 2 executors 1 + 2 * (4 - 1) / 2 + 51.2
    assert fleet_row["figures"].startswith("0.054 / 0.301 s = 0.18 (fits over 2 sizes")
    assert "per node beyond the fixed start 0.050 / 0.300 s" in fleet_row["figures"]
    # per node above a third of direct's: not met at any size
    runs = _sized(fleet, (10, 20), 1.0, 0.12)
    (row,) = [t for t in fleet.targets(runs) if t.get("projected")]
    assert not row["met"]
    # one size cannot tell the fixed start from the cost per node: no fleet row
    assert not [t for t in fleet.targets(_sized(fleet, (40,), 1.0, 0.05)) if t.get("projected")]
    # two sizes measured one way only: no fleet row either
    runs = _sized(fleet, (10, 20), 1.0, 0.05)
    del runs[20]["executors"]
    assert not [t for t in fleet.targets(runs) if t.get("projected")]


def test_a_fleet_fit_whose_cost_falls_with_nodes_gives_no_verdict(fleet):
    # through executors 2.0 s at 10 nodes and 1.5 s at 20: the noise of a loaded machine
    runs = _sized(fleet, (10, 20), 2.5, -0.05)
    (row,) = [t for t in fleet.targets(runs) if t.get("projected")]
    assert row["met"] is None
    assert row["figures"].startswith("no verdict: a cost per node that is not positive")
    doc = {"started": "t", "stack": "s", "cores": 2, "load_at_start": 1.0}
    assert "  no fit   1,024 nodes projected, scan" in fleet.report_text(doc, runs)
