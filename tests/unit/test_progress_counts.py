"""install's status line moves with every task, not only when a host's play ends; a host
the play did not finish when the run was stopped is interrupted, never ok."""

from __future__ import annotations

import io
import re

import pytest

from gpuboot.progress import STATUS_EVERY_S, InstallProgress, Screen, live_install
from gpuboot.runner import EventFolder

HOSTS = ["node1", "node2", "node3", "node4"]


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _event(kind: str, host: str, task: str, **data) -> dict:
    return {"event": kind, "event_data": {"host": host, "task": task, "task_uuid": task, **data}}


def _tasks(fold, clock, tasks: int, hosts=HOSTS) -> None:
    for n in range(tasks):
        for host in hosts:
            fold(_event("runner_on_start", host, f"T{n}"))
            clock.now += STATUS_EVERY_S + 1  # a status line is due at each task result
            fold(_event("runner_on_ok", host, f"T{n}", res={"changed": host == "node1"}))


def _status_lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if "hosts done" in line]


def test_the_status_moves_per_task_while_no_host_is_done():
    clock = Clock()
    out = io.StringIO()
    progress = InstallProgress(Screen(out, tty=False, clock=clock))
    progress.batch(1, 1, HOSTS, 4)
    _tasks(EventFolder(on_event=progress.event), clock, 3)
    lines = _status_lines(out)
    assert all("0/4 hosts done, 4 running" in line for line in lines)
    counts = [re.search(r"\((\d+) task results, (\d+) changed\)", line) for line in lines]
    seen = [(int(m[1]), int(m[2])) for m in counts if m]
    assert seen[-1] == (12, 3)  # 3 tasks on 4 hosts, node1's changed
    assert len(set(seen)) >= 3  # it moved with the tasks
    assert seen == sorted(seen)


def test_the_task_count_starts_again_with_each_batch():
    clock = Clock()
    out = io.StringIO()
    progress = InstallProgress(Screen(out, tty=False, clock=clock))
    progress.batch(1, 2, HOSTS[:2], 4)
    fold = EventFolder(on_event=progress.event)
    _tasks(fold, clock, 2, HOSTS[:2])
    progress.batch(2, 2, HOSTS[2:], 4)
    _tasks(EventFolder(on_event=progress.event), clock, 1, HOSTS[2:])
    assert "(2 task results, 0 changed)" in _status_lines(out)[-1]


def test_hosts_a_stopped_play_did_not_finish_are_interrupted_not_ok():
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt), live_install(out) as progress:
        progress.batch(1, 1, HOSTS, 4)
        fold = EventFolder(on_event=progress.event)
        for host in HOSTS:  # every host ran a task, then Ctrl-C
            fold(_event("runner_on_start", host, "T0"))
            fold(_event("runner_on_ok", host, "T0", res={"changed": True}))
        fold(_event("runner_on_start", "node2", "T1"))
        fold(_event("runner_on_unreachable", "node2", "T1", res={"msg": "no route"}))
        raise KeyboardInterrupt
    last = out.getvalue().splitlines()[-1]
    assert "1/4 hosts done: 0 ok, 0 changed, 0 failed, 1 unreachable, 3 interrupted" in last


def test_a_play_that_ends_counts_its_hosts_as_they_ended():
    out = io.StringIO()
    with live_install(out) as progress:
        progress.batch(1, 1, HOSTS[:1], 1)
        fold = EventFolder(on_event=progress.event)
        fold(_event("runner_on_start", "node1", "T0"))
        fold(_event("runner_on_ok", "node1", "T0", res={"changed": False}))
    last = out.getvalue().splitlines()[-1]
    assert "1/1 hosts done: 1 ok" in last and "interrupted" not in last
