"""`gpuboot install` progress, replayed from real recorded installs (10 and 20 lab nodes,
--serial 5, one node failed, one became unreachable; tests/fixtures/runner/README.md):
the real command, the real event folding, only ansible-runner replaced by the recording
and the clock by its timeline. Stderr is not a terminal here (a CI log)."""

from __future__ import annotations

import gzip
import itertools
import re
import time
from datetime import datetime

import ansible_runner
import pytest

from gpuboot import cli
from tests.fixtures.runner import replay_install as replay

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")
STATUS = re.compile(r"install: (batch \d+/\d+, )?\d+/\d+ hosts done")


class Recorded:
    """One recording, loaded once, with what it holds (replay.RECORDINGS)."""

    def __init__(self, expect: replay.Recording):
        self.expect = expect
        self.events = replay.load(expect.path)
        self.hosts = replay.hosts_of(self.events)
        self.duration_s = replay.created(self.events[-1]) - replay.created(self.events[0])


@pytest.fixture(scope="module", params=sorted(replay.RECORDINGS))
def rec(request) -> Recorded:
    return Recorded(replay.RECORDINGS[request.param])


def _run(rec, tmp_path, monkeypatch, capsys, *extra: str) -> tuple[int, str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    player = replay.Player(rec.events)
    monkeypatch.setattr(ansible_runner, "run", player.run)
    monkeypatch.setattr(time, "time", player.clock)
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    inventory = replay.write_inventory(tmp_path, rec.hosts)
    code = cli.main(replay.install_argv(inventory, *extra))
    out = capsys.readouterr()
    return code, out.out, out.err


def _names(rec, line: str) -> set[str]:
    return {h for h in rec.hosts if re.search(rf"\b{h}\b", line)}


def test_the_recording_is_a_real_mixed_install(rec):
    assert len(rec.hosts) == rec.expect.hosts and rec.duration_s > 120
    assert {e["batch"] for e in rec.events} == set(range(1, rec.expect.batches + 1))
    kinds = {e["event"] for e in rec.events}
    assert {"runner_on_failed", "runner_on_unreachable", "playbook_on_stats"} <= kinds


def test_a_log_gets_at_most_3_lines_per_host_and_a_status_line_per_10s(
    rec, tmp_path, monkeypatch, capsys
):
    code, _out, err = _run(rec, tmp_path, monkeypatch, capsys)
    assert code == 1  # one host failed, one unreachable
    lines = err.splitlines()
    assert lines and all(STAMP.match(line) for line in lines), lines[:5]
    status = [line for line in lines if STATUS.search(line)]
    events = [line for line in lines if not STATUS.search(line)]
    # one per 10 s; only a batch's start and the close are written sooner (forced)
    assert len(status) <= rec.duration_s / 10 + rec.expect.batches + 1, len(status)
    when = [datetime.fromisoformat(line.split()[0]).timestamp() for line in status]
    sooner = [b - a for a, b in itertools.pairwise(when) if b - a < 10]
    assert len(sooner) <= rec.expect.batches + 1, sooner
    assert len(events) <= 3 * len(rec.hosts), events
    for host in rec.hosts:
        assert sum(host in _names(rec, line) for line in lines) <= 3, host
    # the hosts that need a look are named, with what happened to them
    failed, reason = rec.expect.failed, rec.expect.reason
    assert any(failed in line and reason in line for line in lines)
    assert any(f"{rec.expect.unreachable} UNREACHABLE at" in line for line in lines)
    assert rec.expect.final in status[-1]


KEPT_STDERR = sorted(name for name, r in replay.RECORDINGS.items() if r.stderr)


@pytest.mark.parametrize("name", KEPT_STDERR)
def test_the_replay_writes_the_real_runs_event_lines(name, tmp_path, monkeypatch, capsys):
    rec = Recorded(replay.RECORDINGS[name])
    with gzip.open(rec.expect.stderr, "rt") as fh:
        real = fh.read().splitlines()
    _code, _out, err = _run(rec, tmp_path, monkeypatch, capsys)

    def events(lines: list[str]) -> list[str]:
        return [STAMP.sub("", line) for line in lines if not STATUS.search(line)]

    # batch starts (natural host order), the failed and the unreachable host, word for word
    assert events(err.splitlines()) == events(real)
    assert len(events(real)) == rec.expect.batches + 2


def test_the_task_shown_is_never_a_skipped_one(rec, tmp_path, monkeypatch, capsys):
    ran = {
        e["event_data"]["task"]
        for e in rec.events
        if e["event"] in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable")
    }
    skipped_only = {
        e["event_data"]["task"] for e in rec.events if e["event"] == "runner_on_skipped"
    } - ran
    assert skipped_only  # the recording has tasks every host skipped
    _code, _out, err = _run(rec, tmp_path, monkeypatch, capsys)
    shown = [line for line in err.splitlines() if any(t in line for t in skipped_only)]
    assert shown == []


def test_the_per_task_stream_only_with_verbose(rec, tmp_path, monkeypatch, capsys):
    _code, _out, quiet = _run(rec, tmp_path, monkeypatch, capsys)
    _code, _out, verbose = _run(rec, tmp_path / "v", monkeypatch, capsys, "-v")
    assert not re.search(r"node1 changed: REPO-001", quiet)
    assert re.search(r"node1 changed: REPO-001", verbose)
    assert len(verbose.splitlines()) > 10 * len(quiet.splitlines())


def test_the_final_table_puts_failures_first_and_folds_identical_results(
    rec, tmp_path, monkeypatch, capsys
):
    _code, out, _err = _run(rec, tmp_path, monkeypatch, capsys)
    table = out.splitlines()
    rows = table[2:]  # under the header and its rule
    failed = rec.expect.failed.split()[0]
    converged = str(rec.expect.hosts - 2)
    assert rows[0].split()[:3] == [failed, "1", "FAILED"]
    assert rows[1].split()[:3] == [rec.expect.unreachable, "1", "UNREACHABLE"]
    folded = [r for r in rows if r.startswith("node[")]
    assert len(folded) == 1 and folded[0].split()[:3] == [rec.expect.folded, converged, "changed"]
    assert f"{rec.expect.hosts} hosts: {rec.expect.final}" in table
