"""The worker's guard on plain processes: a worker that leaves its task running in a
session of its own when it cancels, as ansible-runner's worker leaves Ansible's forks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from gpuboot.executor import procs

pytestmark = pytest.mark.subprocess

# Starts its task (a sleep) in a session of its own, says its pid, and on SIGTERM exits
# leaving it running.
WORKER = """
import signal, subprocess, sys
task = subprocess.Popen(["sleep", "60"], start_new_session=True)
print(task.pid, flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
task.wait()
"""
# A supervisor: starts the guard over WORKER, says the worker's and the task's pids, and
# waits to be killed.
SUPERVISOR = """
import os, subprocess, sys, time
read, write = os.pipe()
guard = subprocess.Popen(
    [sys.executable, "-m", "gpuboot.executor.guard", "--parent", str(os.getpid()),
     "--pid-fd", str(write), "--grace-seconds", "5", "--", sys.executable, "-c", sys.argv[1]],
    stdout=subprocess.PIPE, pass_fds=(write,), start_new_session=True)
os.close(write)
print(guard.pid, os.read(read, 32).decode().strip(), guard.stdout.readline().decode().strip(),
      flush=True)
time.sleep(60)
"""


def _guard(
    *command: str, parent: int | None = None, grace_s: float = 5
) -> tuple[subprocess.Popen, int]:
    """The guard over ``command`` as this process's child; and the worker's pid it said
    (0 when it said none)."""
    read, write = os.pipe()
    guard = subprocess.Popen(
        [sys.executable, "-m", "gpuboot.executor.guard", "--parent", str(parent or os.getpid()),
         "--pid-fd", str(write), "--grace-seconds", str(grace_s), "--", *command],
        stdout=subprocess.PIPE, pass_fds=(write,), start_new_session=True,
    )  # fmt: skip
    os.close(write)
    with os.fdopen(read, "rb") as said:
        pid = said.read(32).strip()
    return guard, int(pid or 0)


def _alive(pid: int) -> bool:
    info = procs._stat(str(pid))
    return info is not None and info[2] != "Z"


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_a_supervisor_killed_outright_takes_the_workers_task_with_it():
    supervisor = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, WORKER], stdout=subprocess.PIPE
    )
    pids = [int(p) for p in supervisor.stdout.readline().split()]  # guard, worker, task
    try:
        assert len(pids) == 3 and all(_alive(p) for p in pids)
        supervisor.kill()
        supervisor.wait()
        assert _wait_gone(pids, 5) == []
    finally:
        for pid in _wait_gone(pids, 0):
            os.kill(pid, signal.SIGKILL)


def test_the_guard_exits_as_its_worker_did():
    guard, _ = _guard(sys.executable, "-c", "import sys; sys.exit(3)")
    assert guard.wait(30) == 3
    guard, _ = _guard(sys.executable, "-c", "import os; os.kill(os.getpid(), 9)")
    assert guard.wait(30) == -signal.SIGKILL


def test_the_workers_stdout_ends_with_the_worker_and_sigterm_reaches_it():
    """The guard keeps no copy of the pipe (the supervisor reads the worker's end of stream)
    and passes SIGTERM on (the supervisor's cancel)."""
    guard, worker = _guard(
        sys.executable, "-c", "import os, time; os.write(1, b'hi'); os.close(1); time.sleep(30)"
    )
    try:
        assert guard.stdout.read() == b"hi"  # EOF while the worker still runs
        assert _alive(worker)
        guard.terminate()
        assert guard.wait(30) == -signal.SIGTERM  # the worker's own end
        assert not _alive(worker)
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_worker_that_outlives_the_grace_is_killed_and_the_guard_says_so():
    """Its status is taken before the tree's end reaps it (Popen reads a child reaped by
    someone else as exit 0)."""
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('deaf', flush=True); time.sleep(30)"
    )
    guard, worker = _guard(sys.executable, "-c", stubborn, grace_s=1)
    try:
        assert guard.stdout.readline() == b"deaf\n"
        guard.terminate()
        assert guard.wait(30) == -signal.SIGKILL
        assert not _alive(worker)
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_guard_whose_supervisor_is_already_gone_starts_nothing(tmp_path):
    ran = tmp_path / "ran"
    guard, worker = _guard("touch", str(ran), parent=1)
    assert guard.wait(30) == 128 + signal.SIGTERM
    assert worker == 0 and not ran.exists()
