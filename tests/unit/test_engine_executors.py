"""certify's engine with executors: a host with a gpuboot_domain is collected by its
domain's executor (a local supervisor here, its play on ansible_connection: local), the
others from the controller; each node says who collected it; a lost executor leaves its
hosts not judged (UNKNOWN: never certified, never taken out, exit 8); hosts of one
domain are paired by its executor."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from gpuboot import cli, engine, remote, transport
from gpuboot.bundle.names import META
from gpuboot.certify import evaluate_bundle
from gpuboot.checks import rules
from gpuboot.cli.outcome import EXIT_UNKNOWN
from gpuboot.executor import collect_fleet, pair_job, route
from gpuboot.executor.stream import Executor
from tests.unit.executor.conftest import (
    HALF_OPEN,
    REPLAY,
    executor_tmp,
    jobs_left,
    python_channel,
    stream,
    temp_left,
)
from tests.unit.test_engine import PINS, Failing, Local

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

# The shard's inventory reaches the node on this machine (the operator's inventory may not:
# it must reach its nodes over ssh).
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test(tmp_path):
    """A verb through executors leaves none of its jobs running, nor their temp."""
    yield
    assert not jobs_left(tmp_path)
    assert not temp_left(tmp_path), "a job's temp outlived it"


@pytest.fixture
def inv(tmp_path, monkeypatch) -> Path:
    """c1 from the controller; a1 and a2 in hall-a, whose executor is ex1."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(remote, "KILL_GRACE_S", 0.2)
    procfs = tmp_path / "proc"
    procfs.mkdir()
    path = tmp_path / "inv.yml"
    path.write_text(
        f"all:\n  vars: {{{PINS}, gpuboot_procfs: {procfs}}}\n"
        "  children:\n"
        "    gpu:\n"
        "      hosts:\n"
        "        c1: {ansible_host: 192.0.2.1}\n"
        "        a1: {ansible_host: 10.1.0.1, gpuboot_domain: hall-a}\n"
        "        a2: {ansible_host: 10.1.0.2, gpuboot_domain: hall-a}\n"
        "    gpuboot_executors:\n"
        "      hosts:\n"
        "        ex1: {ansible_host: 192.0.2.9, gpuboot_executor_domains: [hall-a]}\n"
    )
    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Local())
    monkeypatch.setattr(collect_fleet, "_connection", lambda _hostvars: LOCAL)
    return path


def _supervisor(tmp_path: Path) -> Executor:
    temp = executor_tmp(tmp_path)
    supervisor = ("env", f"TMPDIR={temp}", sys.executable, "-m", "gpuboot.executor.supervisor")
    return Executor("ex1", (*supervisor, "--jobs-dir", str(tmp_path / "jobs")))


def _cut(tmp_path: Path) -> Executor:
    """An executor whose stream is cut after the worker's first lines (ssh exit 255)."""
    recorded = tmp_path / "cut"
    recorded.write_bytes(stream()[:200])
    return python_channel("ex1", REPLAY, str(recorded), "255")


def by_host(report) -> dict:
    return {n.host: n for n in report.nodes}


def test_domain_hosts_are_collected_by_their_executor_and_judged_alike(inv, monkeypatch):
    monkeypatch.setattr(route, "executor", lambda _inv, _name: _supervisor(inv.parent))
    report = engine.run(str(inv))
    nodes = by_host(report)
    ran_by = {h: n.executor for h, n in nodes.items()}
    assert ran_by == {"a1": "ex1", "a2": "ex1", "c1": "controller"}
    # the same machine answered all three: the same rules, the same statuses
    statuses = {h: {f.rule: f.status for f in n.findings} for h, n in nodes.items()}
    assert statuses["a1"] == statuses["c1"] == statuses["a2"]
    for host, node in nodes.items():
        meta = json.loads((report.bundle / host / META).read_text())
        assert meta["executor"] == node.executor
    again = evaluate_bundle(str(report.bundle)).nodes  # evaluate says who collected, too
    assert {n.host: n.executor for n in again} == ran_by
    shard = next((report.run_dir / "shards").iterdir())
    assert shard.name == "ex1-1" and (shard / "journal.jsonl").is_file()
    assert not (shard / "private").exists()  # the job's data went with the stream


def test_a_lost_executor_leaves_its_hosts_not_judged(inv, monkeypatch):
    monkeypatch.setattr(route, "preflight", lambda _inv, names: dict.fromkeys(names))
    monkeypatch.setattr(route, "executor", lambda _inv, _name: _cut(inv.parent))
    report = engine.run(str(inv))
    nodes = by_host(report)
    for host in ("a1", "a2"):
        node = nodes[host]
        assert node.verdict == engine.UNKNOWN and node.executor == "ex1"
        assert {f.status for f in node.findings} == {rules.ERROR}  # never FAIL, never PASS
        assert "not judged: executor ex1 lost" in node.findings[0].reason
        assert not (report.bundle / host).exists()
    assert nodes["c1"].verdict != engine.UNKNOWN


def test_an_executor_that_does_not_answer_leaves_its_hosts_not_judged(inv, monkeypatch):
    monkeypatch.setattr(route, "preflight", lambda _inv, names: dict.fromkeys(names, "timeout"))
    monkeypatch.setattr(route, "executor", lambda *_a: pytest.fail("no executor is reached"))
    nodes = by_host(engine.run(str(inv)))
    assert nodes["a1"].verdict == engine.UNKNOWN
    assert "no executor of domain hall-a answered: timeout" in nodes["a1"].findings[0].reason


def test_certify_and_scan_exit_8_when_an_executor_was_lost(inv, monkeypatch, capsys):
    monkeypatch.setattr(route, "preflight", lambda _inv, names: dict.fromkeys(names))
    monkeypatch.setattr(route, "executor", lambda _inv, _name: _cut(inv.parent))
    # c1 fails here (no GPU on this machine): a failed host outranks the unknown ones
    assert cli.main(["certify", "-i", str(inv), "--probes", "none", "--json"]) == 1
    capsys.readouterr()
    code = cli.main(["certify", "-i", str(inv), "--limit", "a1", "--probes", "none", "--json"])
    assert code == EXIT_UNKNOWN
    doc = json.loads(capsys.readouterr().out)
    (node,) = doc["nodes"]
    assert (node["host"], node["verdict"], node["executor"]) == ("a1", "UNKNOWN", "ex1")
    history = inv.parent / "history.jsonl"
    argv = ["scan", "-i", str(inv), "--limit", "a1", "--history", str(history), "--json"]
    assert cli.main(argv) == EXIT_UNKNOWN


def test_ctrl_c_never_waits_for_an_executor(inv, monkeypatch):
    """The controller's Ctrl-C ends the run at once: a shard still running is left to its
    executor (a certify finishes into the spool), never waited for."""
    monkeypatch.setattr(route, "preflight", lambda _inv, names: dict.fromkeys(names))
    silent = python_channel("ex1", HALF_OPEN)  # speaks once, then holds the channel
    monkeypatch.setattr(route, "executor", lambda _inv, _name: silent)
    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Failing(KeyboardInterrupt()))
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="certify stopped before a verdict"):
        engine.run(str(inv))
    assert time.monotonic() - started < 10  # the shard's heartbeat is 20 s


def _on_this_machine(inv: Path) -> None:
    """a1 and a2 at this machine's address: their TCP pair tool reaches its server."""
    text = inv.read_text()
    inv.write_text(text.replace("10.1.0.1", "127.0.0.1").replace("10.1.0.2", "127.0.0.1"))


def test_hosts_of_one_domain_pair_on_their_executor(inv, monkeypatch):
    """a1 and a2 (hall-a) are paired by ex1, the real TCP tool run on this machine; c1,
    alone on the controller, has no partner: pairs never cross halls."""
    _on_this_machine(inv)
    monkeypatch.setattr(route, "executor", lambda _inv, _name: _supervisor(inv.parent))
    report = engine.run(str(inv), probes="quick")
    meta = {h: json.loads((report.bundle / h / META).read_text()) for h in ("a1", "a2", "c1")}
    (run,) = meta["a1"]["pairs"]["tcp_bw"]["a1"]["runs"]
    assert (run["server"], run["client"]) == ("a1", "a2") and run["value"] > 0, run
    assert meta["a2"]["pairs"]["tcp_bw"]["a2"]["runs"] == [run]
    assert (report.bundle / "a1" / "tcp_bw_a2.txt").is_file()  # the server's own output
    assert meta["c1"]["pairs"]["tcp_bw"]["c1"]["status"] == "none"
    shards = sorted(p.name for p in (report.run_dir / "shards").iterdir())
    assert shards == ["ex1-1", "ex1-2"]  # the collection, then the pair's one round


def test_an_executor_lost_during_the_pair_probes_leaves_its_domain_not_judged(inv, monkeypatch):
    """a1 and a2 were collected, then their pair round's stream was cut: both UNKNOWN
    (exit 8), never judged on the pair phase they did not finish; c1 is judged."""
    _on_this_machine(inv)
    monkeypatch.setattr(route, "executor", lambda _inv, _name: _supervisor(inv.parent))
    real = pair_job.rounds_on
    monkeypatch.setattr(pair_job, "rounds_on", lambda _ex, *a: real(_cut(inv.parent), *a))
    report = engine.run(str(inv), probes="quick")
    nodes = by_host(report)
    for host in ("a1", "a2"):
        assert nodes[host].verdict == engine.UNKNOWN and nodes[host].executor == "ex1"
        assert {f.status for f in nodes[host].findings} == {rules.ERROR}
        assert "executor ex1 lost during the pair probes" in nodes[host].findings[0].reason
    assert nodes["c1"].verdict != engine.UNKNOWN
