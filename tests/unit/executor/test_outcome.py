"""A shard counts only when its final status, its end of stream and its rc all arrived."""

from __future__ import annotations

import pytest

from gpuboot.executor.journal import Journal
from gpuboot.executor.outcome import judge
from tests.unit.executor.conftest import event

HOSTS = ("h1", "h2")


def _journal(tmp_path, *, status="successful", rc=0, eof=True, stats=True) -> Journal:
    journal = Journal(tmp_path / "journal.jsonl")
    journal.status({"status": "starting", "env": {"A": "b"}, "command": ["x"]}, 10)
    journal.event(event(1, "runner_on_ok", "h1", "done"), 20)
    journal.event(event(2, "runner_on_failed", "h2", "breaks", res={"msg": "no"}), 30)
    if stats:
        journal.event(event(3, "playbook_on_stats", ok={"h1": 1}, failures={"h2": 1}), 40)
    if status:
        journal.status({"status": status}, 50)
    if rc is not None:
        journal.rc(rc, 60)
    if eof:
        journal.eof(70)
    journal.close()
    return journal


def test_complete_failed_play(tmp_path):
    out = judge(Journal(_journal(tmp_path, status="failed", rc=2).path).replay, HOSTS)
    assert (out.state, out.status, out.rc) == ("complete", "failed", 2)
    assert out.hosts == {"h1": "ok", "h2": "failed"}


@pytest.mark.parametrize(
    "missing",
    [{"status": None}, {"status": "running"}, {"rc": None}, {"eof": False}],
    ids=["no-final-status", "last-status-running", "no-rc", "no-eof"],
)
def test_anything_missing_is_lost_and_its_hosts_unknown(tmp_path, missing):
    out = judge(_journal(tmp_path, **missing).replay, HOSTS)
    assert out.state == "lost" and out.reason
    assert out.hosts == {"h1": "unknown", "h2": "unknown"}


def test_ssh_exit_255_is_lost_even_after_a_whole_stream(tmp_path):
    out = judge(_journal(tmp_path).replay, HOSTS, channel_rc=255)
    assert out.state == "lost" and "255" in out.reason


def test_a_lost_shard_keeps_the_hosts_that_reached_the_final_task(tmp_path):
    out = judge(_journal(tmp_path, eof=False, stats=False).replay, HOSTS, final_task="done")
    assert out.state == "lost"
    assert out.hosts == {"h1": "ok", "h2": "unknown"}  # h2's failure may yet be rescued


def test_canceled_is_its_own_state_with_unfinished_hosts_unknown(tmp_path):
    out = judge(_journal(tmp_path, status="canceled", rc=254, stats=False).replay, HOSTS)
    assert (out.state, out.rc) == ("canceled", 254)
    assert set(out.hosts.values()) == {"unknown"}


def test_the_journal_keeps_no_environment_and_records_an_event_once(tmp_path):
    journal = _journal(tmp_path)
    assert "env" not in journal.path.read_text()
    again = Journal(journal.path)
    assert again.event(event(1, "runner_on_ok", "h1", "done"), 80) is False
    assert again.replay.offset == 70


def test_an_executors_events_for_a_host_outside_its_shard_say_nothing_of_it(tmp_path):
    # an executor is trusted less than the controller: it must not vouch for another hall's
    # (or the controller's) host, e.g. mark ok a host that failed elsewhere
    journal = Journal(tmp_path / "journal.jsonl")
    journal.status({"status": "starting"}, 10)
    journal.event(event(1, "runner_on_ok", "h1", "done"), 20)
    journal.event(event(2, "runner_on_ok", "other-hall-node", "done"), 30)
    journal.event(event(3, "playbook_on_stats", ok={"h1": 1, "other-hall-node": 1}), 40)
    journal.status({"status": "successful"}, 50)
    journal.rc(0, 60)
    journal.eof(70)
    journal.close()
    out = judge(Journal(journal.path).replay, ("h1",))
    assert out.hosts == {"h1": "ok"}
    assert set(out.results) == {"h1"}
