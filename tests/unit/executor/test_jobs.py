"""D4: the garbage collector removes dead jobs only, liveness by the supervisor's lock."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuboot.executor import jobs, procs

# A pid no process has: above the kernel's pid_max.
DEAD_PID = 2**23


def _job_with_secret(root, job_id):
    job = jobs.Job(root, job_id)
    job.data.mkdir(parents=True, exist_ok=False)
    (job.data / "env").mkdir()
    (job.data / "env" / "ssh_key").write_text("secret")
    job.spool.write_text("{}\n")
    return job


def test_bare_runner_cleanup_deletes_the_live_job_and_keeps_the_dead_one(tmp_path):
    """What ``ansible-runner worker cleanup`` does: liveness by a pid file, read backwards."""
    from ansible_runner.cleanup import cleanup_dirs

    live, dead = tmp_path / "live", tmp_path / "dead"
    for path, pid in ((live, os.getpid()), (dead, DEAD_PID)):
        path.mkdir()
        (path / "pid").write_text(str(pid))
    cleanup_dirs(str(tmp_path / "*"), grace_period=0)
    assert not live.exists()  # the running job's directory is gone
    assert dead.exists()  # the dead one's stays


def test_gpuboot_collects_the_dead_job_and_never_the_live_one(tmp_path):
    lock_fd = jobs.claim(jobs.Job(tmp_path, "live"))  # what a running supervisor holds
    live = _job_with_secret(tmp_path, "live")
    dead = _job_with_secret(tmp_path, "dead")
    try:
        assert jobs.is_live(live) and not jobs.is_live(dead)
        assert jobs.collect_garbage(tmp_path, keep_s=0) == ["dead"]
        assert live.data.exists() and live.spool.exists()
        assert not dead.dir.exists() and not dead.lock_path.exists()
    finally:
        os.close(lock_fd)
    assert jobs.collect_garbage(tmp_path, keep_s=0) == ["live"]


def test_a_dead_job_loses_its_secrets_at_once_and_its_spool_after_the_keep_time(tmp_path):
    dead = _job_with_secret(tmp_path, "dead")
    assert jobs.collect_garbage(tmp_path, keep_s=3600) == []
    assert not dead.data.exists()  # the transmitted keys and variables
    assert dead.spool.exists()  # the stream waits for its controller to re-attach


def test_a_dead_jobs_temp_goes_at_once_and_a_live_jobs_stays(tmp_path):
    """The temp a killed job's processes wrote in (Ansible's module payloads on a local
    host) is the job's leftovers, like its data: collected at once for a dead job, never
    touched for a live one."""
    root, executor_tmp = tmp_path / "jobs", tmp_path / "tmp"
    root.mkdir()
    executor_tmp.mkdir()
    lock_fd = jobs.claim(jobs.Job(root, "live"))
    live, dead = _job_with_secret(root, "live"), _job_with_secret(root, "dead")
    temps = {}
    for job in (live, dead):
        temps[job.job_id] = jobs.make_temp(job, executor_tmp)
        (temps[job.job_id] / "ansible_ansible.legacy.command_payload_x").mkdir()
    try:
        assert oct(temps["dead"].stat().st_mode & 0o777) == "0o700"
        assert jobs.collect_garbage(root, keep_s=3600) == []
        assert not temps["dead"].exists() and not dead.data.exists()
        assert temps["live"].exists() and live.data.exists()
    finally:
        os.close(lock_fd)
    assert jobs.release(live) and not temps["live"].exists()
    assert not list(executor_tmp.iterdir())


def test_release_refuses_a_live_job(tmp_path):
    job = jobs.Job(tmp_path, "j1")
    fd = jobs.claim(job)
    try:
        assert jobs.release(job) is False and job.dir.exists()
    finally:
        os.close(fd)
    assert jobs.release(job) is True and not job.dir.exists()


def _until_running(proc: subprocess.Popen, word: str, timeout_s: float = 10.0) -> None:
    """Until /proc shows ``proc`` running with ``word`` on its command line (a loaded
    machine may show it a moment after Popen returns); fails if it ended instead."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the stand-in process ended (exit {proc.returncode})"
        with contextlib.suppress(OSError):
            if word.encode() in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                return
        time.sleep(0.05)
    pytest.fail(f"process {proc.pid} never showed {word} on its command line")


@pytest.mark.subprocess
def test_what_a_dead_job_left_running_is_ended_and_nothing_of_another_job(tmp_path):
    """Only processes naming the job's own data directory (or a path under it) are ended:
    a neighbour whose directory name merely starts the same way keeps running."""
    mine, neighbour = tmp_path / "job1" / "data", tmp_path / "job1" / "data2"
    code = "import time; time.sleep(60)"
    left = subprocess.Popen([sys.executable, "-c", code, str(mine / "inventory")])
    other = subprocess.Popen([sys.executable, "-c", code, str(neighbour)])
    try:
        _until_running(left, str(mine))
        assert procs.end_marked(str(mine)) == [left.pid]
        assert left.wait(10) != 0 and other.poll() is None
    finally:
        other.kill()
        other.wait()
