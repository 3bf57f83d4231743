"""`gpuboot install` progress, replayed from a real recorded install (10 lab nodes,
--serial 5: node3 failed, node8 became unreachable; tests/fixtures/runner/README.md):
the real command, the real event folding, only ansible-runner replaced by the recording
and the clock by its timeline. Stderr is not a terminal here (a CI log)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import ansible_runner
import pytest

from gpuboot import cli

sys.path.insert(0, str(Path(__file__).parents[2] / "fixtures" / "runner"))
import replay_install as replay

EVENTS = replay.load()
HOSTS = replay.hosts_of(EVENTS)
DURATION_S = replay.created(EVENTS[-1]) - replay.created(EVENTS[0])
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")
STATUS = re.compile(r"install: (batch \d+/\d+, )?\d+/\d+ hosts done")


def _run(tmp_path, monkeypatch, capsys, *extra: str) -> tuple[int, str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    player = replay.Player(EVENTS)
    monkeypatch.setattr(ansible_runner, "run", player.run)
    monkeypatch.setattr(time, "time", player.clock)
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    inventory = replay.write_inventory(tmp_path, HOSTS)
    code = cli.main(replay.install_argv(inventory, *extra))
    out = capsys.readouterr()
    return code, out.out, out.err


def _names(line: str) -> set[str]:
    return {h for h in HOSTS if re.search(rf"\b{h}\b", line)}


def test_the_recording_is_a_real_mixed_install():
    assert len(HOSTS) == 10 and DURATION_S > 120
    assert {e["batch"] for e in EVENTS} == {1, 2}
    kinds = {e["event"] for e in EVENTS}
    assert {"runner_on_failed", "runner_on_unreachable", "playbook_on_stats"} <= kinds


def test_a_log_gets_at_most_3_lines_per_host_and_a_status_line_per_10s(
    tmp_path, monkeypatch, capsys
):
    code, _out, err = _run(tmp_path, monkeypatch, capsys)
    assert code == 1  # node3 failed, node8 unreachable
    lines = err.splitlines()
    assert lines and all(STAMP.match(line) for line in lines), lines[:5]
    status = [line for line in lines if STATUS.search(line)]
    events = [line for line in lines if not STATUS.search(line)]
    assert len(status) <= DURATION_S / 10 + 2 * 2 + 1, len(status)  # + batch starts, close
    assert len(events) <= 3 * len(HOSTS), events
    for host in HOSTS:
        assert sum(host in _names(line) for line in lines) <= 3, host
    # the hosts that need a look are named, with what happened to them
    assert any("node3 FAILED at REPO-003" in line and "Malformed entry" in line for line in lines)
    assert any("node8 UNREACHABLE at" in line for line in lines)
    assert "0 ok, 8 changed, 1 failed, 1 unreachable" in status[-1]


def test_the_task_shown_is_never_a_skipped_one(tmp_path, monkeypatch, capsys):
    ran = {
        e["event_data"]["task"]
        for e in EVENTS
        if e["event"] in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable")
    }
    skipped_only = {
        e["event_data"]["task"] for e in EVENTS if e["event"] == "runner_on_skipped"
    } - ran
    assert skipped_only  # the recording has tasks every host skipped
    _code, _out, err = _run(tmp_path, monkeypatch, capsys)
    shown = [line for line in err.splitlines() if any(t in line for t in skipped_only)]
    assert shown == []


def test_the_per_task_stream_only_with_verbose(tmp_path, monkeypatch, capsys):
    _code, _out, quiet = _run(tmp_path, monkeypatch, capsys)
    _code, _out, verbose = _run(tmp_path / "v", monkeypatch, capsys, "-v")
    assert not re.search(r"node1 changed: REPO-001", quiet)
    assert re.search(r"node1 changed: REPO-001", verbose)
    assert len(verbose.splitlines()) > 10 * len(quiet.splitlines())


@pytest.fixture
def table(tmp_path, monkeypatch, capsys) -> list[str]:
    _code, out, _err = _run(tmp_path, monkeypatch, capsys)
    return out.splitlines()


def test_the_final_table_puts_failures_first_and_folds_identical_results(table):
    rows = table[2:]  # under the header and its rule
    assert rows[0].split()[:3] == ["node3", "1", "FAILED"]
    assert rows[1].split()[:3] == ["node8", "1", "UNREACHABLE"]
    folded = [r for r in rows if r.startswith("node[")]
    assert len(folded) == 1 and folded[0].split()[:3] == ["node[1-2,4-7,9-10]", "8", "changed"]
    assert "10 hosts: 0 ok, 8 changed, 1 failed, 1 unreachable" in table
