"""D1-D6 and the ways a shard ends, on a real ``ansible-runner worker`` running a tiny
local play (h1, h2: ansible_connection=local). Each defect is shown on the bare
transmit | worker | process pipeline first (the wrong answer asserted), then through
gpuboot's supervisor and reader."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from gpuboot.executor import jobs, procs
from gpuboot.executor.stream import Executor, ShardJob, attach_shard, run_shard
from tests.unit.executor.conftest import (
    HALF_OPEN,
    HOSTS,
    JOB_SECRET,
    RELAY,
    REPLAY,
    executor_tmp,
    python_channel,
    write_job,
)

pytestmark = pytest.mark.subprocess

SENTINEL_VAR = "GPUBOOT_TEST_SENTINEL"
SENTINEL = "sentinel-" + uuid.uuid4().hex


def _transmitted(data: Path, **kwargs) -> bytes:
    from ansible_runner.streaming import Transmitter

    buf = io.BytesIO()
    buf.name = "transmit"  # runner's stream_dir asks its output's name
    Transmitter(_output=buf, private_data_dir=str(data), **kwargs).run()
    return buf.getvalue()


def _bare_worker(data_dir: Path, transmitted: bytes) -> subprocess.Popen:
    """ansible-runner worker as AWX's receptor would start it, the sentinel in its env; its
    temp (Ansible's and its modules') beside it: a test that kills it leaves nothing in the
    machine's."""
    temp = data_dir.with_name(f"{data_dir.name}-tmp")
    temp.mkdir()
    temp_env = dict.fromkeys(("TMPDIR", "ANSIBLE_LOCAL_TEMP"), str(temp))
    worker = subprocess.Popen(
        [sys.executable, "-m", "ansible_runner", "worker", "--private-data-dir", str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, SENTINEL_VAR: SENTINEL, **temp_env},
        start_new_session=True,
    )
    worker.stdin.write(transmitted)
    worker.stdin.close()
    return worker


def _bare_process(stream: bytes, tmp_path: Path):
    """``ansible-runner process`` (run(streamer='process')) over a recorded stream."""
    from ansible_runner.interface import run

    return run(
        streamer="process",
        _input=io.BytesIO(stream),
        private_data_dir=str(tmp_path / "bare-process"),
        quiet=True,
    )


@pytest.fixture(scope="module")
def bare_streams(tmp_path_factory) -> dict:
    """Bare workers, run at once: the whole streams of a successful and a failing play, and
    how a worker ended whose controller went away after its first line (``detached``)."""
    tmp = tmp_path_factory.mktemp("bare")
    data = write_job(tmp / "job")
    workers = {
        name: _bare_worker(
            tmp / name, _transmitted(data, playbook=f"{play}.yml", inventory="inventory/hosts")
        )
        for name, play in (("ok", "ok"), ("fail", "fail"), ("detached", "ok"))
    }
    detached = workers.pop("detached")
    detached.stdout.readline()
    detached.stdout.close()  # the controller's side of the pipe goes away
    found = {name: w.stdout.read() for name, w in workers.items()}
    for worker in workers.values():
        worker.wait(60)
    found["detached"] = (detached.wait(60), detached.stderr.read(), tmp / "detached")
    return found


def _supervisor(tmp_path: Path) -> Executor:
    return Executor(
        "local",
        ("env", f"{SENTINEL_VAR}={SENTINEL}", f"TMPDIR={executor_tmp(tmp_path)}",
         sys.executable, "-m", "gpuboot.executor.supervisor",
         "--jobs-dir", str(tmp_path / "jobs"),
         "--playbooks-dir", str(tmp_path / "job" / "project")),  # job_data's plays
    )  # fmt: skip


def _job(data: Path, play: str, **kw) -> ShardJob:
    return ShardJob(
        job_id=kw.pop("job_id", uuid.uuid4().hex[:12]),
        private_data_dir=data,
        runner_kwargs={
            "playbook": play,
            "inventory": "inventory/hosts",
            # runner looks for a cancel between pexpect reads: every 5 s unless told
            "settings": {"pexpect_timeout": 0.5},
            **kw.pop("runner", {}),
        },
        hosts=HOSTS,
        final_task=kw.pop("final_task", "done"),
        keepalive_s=1,
        heartbeat_s=kw.pop("heartbeat_s", 4),
        **kw,
    )


def _replay(tmp_path: Path, stream: bytes, exit_code: int = 0) -> Executor:
    recorded = tmp_path / f"stream-{uuid.uuid4().hex[:6]}"
    recorded.write_bytes(stream)
    return python_channel("replay", REPLAY, str(recorded), str(exit_code))


def _in_thread(fn, *args):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("out", fn(*args)), daemon=True)
    thread.start()
    return thread, box


def _wait_for(predicate, timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _journal_has(shard_dir: Path, kind: str, host: str, task: str) -> bool:
    path = shard_dir / "journal.jsonl"
    if not path.exists():
        return False
    for line in path.read_text().splitlines():
        try:
            data = json.loads(line)["d"]
        except (ValueError, KeyError):
            continue
        if isinstance(data, dict) and data.get("event") == kind:
            ev = data.get("event_data") or {}
            if (ev.get("host"), ev.get("task")) == (host, task):
                return True
    return False


def _h2_sleeping(shard_dir: Path) -> bool:
    return _journal_has(shard_dir, "runner_on_start", "h2", "wait") and _journal_has(
        shard_dir, "runner_on_ok", "h1", "done"
    )


def _tree_with_sleep(root: int) -> dict[int, int]:
    """``root``'s descendants once h2's ``sleep`` runs among them: the deepest process a
    play starts (in a session of Ansible's worker's own) is there when the test strikes."""

    def sleeping() -> bool:
        for pid in procs.descendants(root):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read().startswith(b"sleep\0"):
                    return True
        return False

    _wait_for(sleeping, what="h2's sleep process")
    return procs.descendants(root)


def _alive(pid: int) -> bool:
    info = procs._stat(str(pid))
    return info is not None and info[2] != "Z"


def _groups_alive(pgids: set[int]) -> list[int]:
    return [
        int(p) for p in os.listdir("/proc")
        if p.isdigit() and (info := procs._stat(p)) and info[1] in pgids and info[2] != "Z"
    ]  # fmt: skip


def _meta(tmp_path: Path, job: ShardJob) -> dict:
    path = jobs.Job(tmp_path / "jobs", job.job_id).meta
    _wait_for(lambda: path.exists() and "worker_pid" in path.read_text(), what="the job's meta")
    return json.loads(path.read_text())


# D1 -------------------------------------------------------------------------------------


def test_d1_a_failed_play_is_no_error_to_process_and_failed_through_gpuboot(bare_streams, tmp_path):
    bare = _bare_process(bare_streams["fail"], tmp_path)
    assert bare.rc is None  # `ansible-runner process` exits 0 on it

    out = run_shard(
        _job(tmp_path, "fail.yml"), _replay(tmp_path, bare_streams["fail"]), tmp_path / "s"
    )
    assert (out.state, out.status, out.rc) == ("complete", "failed", 2)
    assert out.hosts == {"h1": "failed", "h2": "failed"}


@pytest.mark.parametrize("cut_at", ["after-final-status", "inside-artifacts"])
def test_d1_a_cut_stream_is_no_error_to_process_and_lost_through_gpuboot(
    bare_streams, tmp_path, cut_at
):
    whole = bare_streams["ok"]
    final = whole.index(b'{"status": "successful"')
    end = whole.index(b"\n", final) + 1 if cut_at == "after-final-status" else len(whole) - 40
    stream = whole[:end]
    if cut_at == "after-final-status":  # the last status says successful
        assert _bare_process(stream, tmp_path).rc is None  # `process` exits 0 all the same

    # no final task named: only a whole stream's stats could say a host is done
    job = _job(tmp_path, "ok.yml", final_task=None)
    out = run_shard(job, _replay(tmp_path, stream), tmp_path / "s")
    assert out.state == "lost" and out.reason
    assert out.hosts == {"h1": "unknown", "h2": "unknown"}


def test_ssh_exit_255_after_a_whole_stream_is_lost(bare_streams, tmp_path):
    out = run_shard(
        _job(tmp_path, "ok.yml", final_task=None),
        _replay(tmp_path, bare_streams["ok"], 255),
        tmp_path / "s",
    )
    assert out.state == "lost" and "255" in out.reason
    assert set(out.hosts.values()) == {"unknown"}


# ssh after a whole stream: its stdout closes first, then it takes a moment to exit 0 (the
# remote side's exit status, the connection's teardown); ended by a signal, ssh exits 255
SLOW_EXIT = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: os._exit(255))
sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())
sys.stdout.flush()
os.close(1)
time.sleep(0.5)
"""


def test_a_whole_stream_whose_channel_exits_a_moment_after_its_end_is_complete(
    bare_streams, tmp_path
):
    # ended at once, ssh's 0 would read as a signal or 255: a complete shard judged lost
    recorded = tmp_path / "stream"
    recorded.write_bytes(bare_streams["ok"])
    channel = python_channel("slow-exit", SLOW_EXIT, str(recorded))
    out = run_shard(_job(tmp_path, "ok.yml", final_task=None), channel, tmp_path / "s")
    assert out.state == "complete", out.reason


# D5 -------------------------------------------------------------------------------------


def test_d5_the_bare_worker_sends_its_environment_back_and_process_writes_it(
    bare_streams, tmp_path
):
    first = json.loads(bare_streams["ok"].split(b"\n", 1)[0])
    assert first["env"][SENTINEL_VAR] == SENTINEL
    _bare_process(bare_streams["ok"], tmp_path)
    written = [p for p in (tmp_path / "bare-process").rglob("*") if p.is_file()]
    assert any(SENTINEL in p.read_text(errors="replace") for p in written)

    out = run_shard(_job(tmp_path, "ok.yml"), _replay(tmp_path, bare_streams["ok"]), tmp_path / "s")
    assert out.state == "complete"  # the same stream, read by gpuboot
    files = [p for p in (tmp_path / "s").rglob("*") if p.is_file()]
    assert files and not any(SENTINEL in p.read_text(errors="replace") for p in files)


# D6 -------------------------------------------------------------------------------------


def test_d6_a_half_open_connection_blocks_process_and_is_lost_within_the_heartbeat(tmp_path):
    from ansible_runner.streaming import Processor

    silent = subprocess.Popen([sys.executable, "-c", HALF_OPEN], stdout=subprocess.PIPE)
    try:
        bare = Processor(_input=silent.stdout, private_data_dir=str(tmp_path / "bare"), quiet=True)
        thread = threading.Thread(target=bare.run, daemon=True)
        thread.start()
        thread.join(2)
        assert thread.is_alive()  # still waiting, and would for ever
    finally:
        silent.kill()
        silent.wait()

    started = time.monotonic()
    job = _job(tmp_path, "ok.yml", heartbeat_s=1.5)
    out = run_shard(job, python_channel("silent", HALF_OPEN), tmp_path / "s")
    assert time.monotonic() - started < 1.5 + 10  # the heartbeat, the channel's grace
    assert out.state == "lost" and "silent" in out.reason
    assert set(out.hosts.values()) == {"unknown"}


# D2, kill -9 ------------------------------------------------------------------------------


def test_d2_kill_9_of_the_bare_worker_leaves_ansible_playbook_and_the_secrets(job_data, tmp_path):
    data_dir = tmp_path / "bare-worker"
    worker = _bare_worker(data_dir, _transmitted(job_data, playbook="split.yml",
                                                 inventory="inventory/hosts"))  # fmt: skip
    try:
        for raw in iter(worker.stdout.readline, b""):
            ev = json.loads(raw).get("event_data") or {}
            if (ev.get("host"), ev.get("task")) == ("h2", "wait"):
                break
        tree = _tree_with_sleep(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        time.sleep(0.5)
        assert [p for p in tree if _alive(p)]  # ansible-playbook and its workers: orphans
        secret = data_dir / "env" / "extravars"  # the transmitted job, with its secrets
        assert JOB_SECRET in secret.read_text()
    finally:
        for pgid in set(tree.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


def test_kill_9_of_the_worker_is_lost_hosts_unknown_and_nothing_left(job_data, tmp_path):
    job = _job(job_data, "split.yml")
    shard = tmp_path / "s"
    thread, box = _in_thread(run_shard, job, _supervisor(tmp_path), shard)
    _wait_for(lambda: _h2_sleeping(shard), what="h2 in its sleep")
    meta = _meta(tmp_path, job)
    tree = _tree_with_sleep(meta["supervisor_pid"])
    os.kill(meta["worker_pid"], signal.SIGKILL)
    thread.join(60)
    out = box["out"]
    assert out.state == "lost"
    assert out.hosts == {"h1": "ok", "h2": "unknown"}  # h1 had finished; h2 never did
    assert not [p for p in tree if _alive(p)]
    assert not _groups_alive({g for g in tree.values() if g != os.getpgid(0)})
    assert not jobs.Job(tmp_path / "jobs", job.job_id).data.exists()
    # h2's module was killed in its sleep: its payload went with the job's temp
    assert not list(executor_tmp(tmp_path).iterdir())


def test_kill_9_of_the_supervisor_ends_the_task_in_flight_at_once_and_gc_removes_its_data(
    job_data, tmp_path
):
    """The supervisor killed outright (an OOM kill, an operator's kill -9): its worker's
    guard is told by the kernel (parent-death signal), the worker cancels, and the task in
    flight (h2's sleep, in a session of Ansible's own, 30 s to go) ends with it within
    seconds, no gc run; gc removes the job's data (the transmitted secrets)."""
    job = _job(job_data, "split.yml")
    shard, executor = tmp_path / "s", _supervisor(tmp_path)
    thread, box = _in_thread(run_shard, job, executor, shard)
    _wait_for(lambda: _h2_sleeping(shard), what="h2 in its sleep")
    meta = _meta(tmp_path, job)
    tree = _tree_with_sleep(meta["supervisor_pid"])
    os.kill(meta["supervisor_pid"], signal.SIGKILL)
    try:
        _wait_for(lambda: not [p for p in tree if _alive(p)], 15, "the job's processes to end")
        thread.join(60)
        assert box["out"].state == "lost"
        data = jobs.Job(tmp_path / "jobs", job.job_id).data
        assert data.exists()  # the guard ends processes; the data waits for gc
        assert Path(meta["temp"]).exists()  # and so does the job's temp
        subprocess.run(executor.command("gc"), capture_output=True, check=True)
        assert not data.exists()
        assert not list(executor_tmp(tmp_path).iterdir())  # the temp, payloads and all
    finally:
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# D2, cancel -------------------------------------------------------------------------------


def test_cancel_ends_canceled_with_no_ansible_playbook_left(job_data, tmp_path):
    job = _job(job_data, "split.yml")
    shard, executor = tmp_path / "s", _supervisor(tmp_path)
    thread, box = _in_thread(run_shard, job, executor, shard)
    _wait_for(lambda: _h2_sleeping(shard), what="h2 in its sleep")
    tree = _tree_with_sleep(_meta(tmp_path, job)["supervisor_pid"])
    assert subprocess.run(executor.command("cancel", "--job-id", job.job_id)).returncode == 0
    thread.join(60)
    out = box["out"]
    assert (out.state, out.status, out.rc) == ("canceled", "canceled", 254)
    assert out.hosts == {"h1": "ok", "h2": "unknown"}
    assert not [p for p in tree if _alive(p)]
    assert not _groups_alive({g for g in tree.values() if g != os.getpgid(0)})
    assert not jobs.Job(tmp_path / "jobs", job.job_id).data.exists()
    assert not list(executor_tmp(tmp_path).iterdir())  # h2's module payload with the job


def test_a_job_ended_normally_ran_in_a_short_temp_of_its_own_and_leaves_none(job_data, tmp_path):
    """The worker's temp is the job's own, recorded in its meta, a short name in the
    executor's temp (mitogen binds its socket there; the job directory can be too deep for
    a Unix socket), and gone with the job's end."""
    job = _job(job_data, "ok.yml")
    out = run_shard(job, _supervisor(tmp_path), tmp_path / "s")
    assert out.state == "complete"
    spooled = jobs.Job(tmp_path / "jobs", job.job_id)
    temp = Path(jobs.recorded(spooled)["temp"])
    assert temp.parent == executor_tmp(tmp_path) and len(temp.name) <= 20
    worker_env = json.loads(spooled.spool.read_bytes().split(b"\n", 1)[0])["env"]
    assert worker_env["TMPDIR"] == worker_env["ANSIBLE_LOCAL_TEMP"] == str(temp)
    assert not list(executor_tmp(tmp_path).iterdir())


# D3, re-attach ----------------------------------------------------------------------------


def test_d3_the_bare_worker_loses_the_results_when_the_controller_goes(bare_streams):
    rc, stderr, data_dir = bare_streams["detached"]
    assert rc != 0 and b"BrokenPipeError" in stderr  # it died writing its final status
    assert not list(data_dir.rglob("artifacts/*/rc"))  # the play's rc exists nowhere


def test_d3_the_job_finishes_into_the_spool_and_reattach_reads_every_event_once(job_data, tmp_path):
    job = _job(job_data, "split.yml", runner={"extravars": {"wait_s": 1}})
    shard, supervisor = tmp_path / "s", _supervisor(tmp_path)
    pidfile = tmp_path / "relay.pid"
    relay = python_channel("relay", RELAY, str(pidfile), *supervisor.argv)
    thread, box = _in_thread(run_shard, job, relay, shard)
    _wait_for(lambda: _journal_has(shard, "runner_on_start", "h2", "wait"), what="h2's sleep")
    os.kill(int(pidfile.read_text()), signal.SIGKILL)  # ssh dies; the executor goes on
    thread.join(60)
    assert box["out"].state == "lost"

    spool = jobs.Job(tmp_path / "jobs", job.job_id)
    _wait_for(lambda: not jobs.is_live(spool), what="the job to finish into its spool")
    out = attach_shard(job, supervisor, shard)
    assert (out.state, out.status, out.rc) == ("complete", "successful", 0)
    assert out.hosts == {"h1": "ok", "h2": "ok"}

    sent = [
        json.loads(raw)["uuid"]
        for raw in spool.spool.read_bytes().splitlines()
        if raw.startswith(b'{"uuid"') or (b'"event":' in raw[:200] and b'"uuid"' in raw)
    ]
    journaled = [
        json.loads(raw)["d"]["uuid"]
        for raw in (shard / "journal.jsonl").read_text().splitlines()
        if json.loads(raw)["k"] == "event"
    ]
    assert sorted(journaled) == sorted(u for u in sent if u)  # all, none twice
    assert len(journaled) == len(set(journaled))
    # D5 through the supervisor: its environment held the sentinel, its worker's did not
    assert SENTINEL.encode() not in spool.spool.read_bytes()
    files = [p for p in shard.rglob("*") if p.is_file()]
    assert not any(SENTINEL in p.read_text(errors="replace") for p in files)


def test_a_job_that_cancels_on_detach_is_canceled_when_the_controller_goes(job_data, tmp_path):
    job = _job(job_data, "split.yml", on_detach="cancel")  # what a scan asks
    shard, supervisor = tmp_path / "s", _supervisor(tmp_path)
    pidfile = tmp_path / "relay.pid"
    relay = python_channel("relay", RELAY, str(pidfile), *supervisor.argv)
    thread, box = _in_thread(run_shard, job, relay, shard)
    _wait_for(lambda: _h2_sleeping(shard), what="h2 in its sleep")
    tree = _tree_with_sleep(_meta(tmp_path, job)["supervisor_pid"])
    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    thread.join(60)
    assert box["out"].state == "lost"

    spool = jobs.Job(tmp_path / "jobs", job.job_id)
    _wait_for(lambda: not jobs.is_live(spool), timeout_s=30, what="the cancel")  # not sleep 30
    out = attach_shard(job, supervisor, shard)
    assert (out.state, out.rc) == ("canceled", 254)
    assert out.hosts == {"h1": "ok", "h2": "unknown"}
    assert not [p for p in tree if _alive(p)]
    assert not list(executor_tmp(tmp_path).iterdir())
