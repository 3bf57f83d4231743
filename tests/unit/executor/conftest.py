"""Executor fixtures: a tiny local job (localhost, ansible_connection=local) and streams."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

PLAYS = {
    # h1 reaches the final task at once; h2 sleeps first (free strategy: h1 does not wait)
    "split.yml": """
- hosts: all
  gather_facts: false
  strategy: free
  tasks:
    - name: started
      ansible.builtin.debug: {msg: go}
    - name: wait
      ansible.builtin.command: sleep {{ wait_s | default(30) }}
      changed_when: false
      when: inventory_hostname == 'h2'
    - name: done
      ansible.builtin.debug: {msg: done}
""",
    "ok.yml": """
- hosts: all
  gather_facts: false
  tasks:
    - name: done
      ansible.builtin.debug: {msg: done}
""",
    "fail.yml": """
- hosts: all
  gather_facts: false
  tasks:
    - name: breaks
      ansible.builtin.command: "false"
""",
}
HOSTS = ("h1", "h2")
JOB_SECRET = "job-secret-7d1e"


def executor_tmp(tmp_path: Path) -> Path:
    """A test supervisor's own temp (its TMPDIR), where each job's temp is made: the
    test's alone, and as short as an executor's /tmp: a job keeps its ssh sockets (and
    mitogen its socket) in its temp when its run directory is too deep for a Unix socket
    path, and pytest's directories are. Made here, removed by the test's teardown."""
    temp = Path("/tmp") / f"gx-{hashlib.sha256(bytes(tmp_path)).hexdigest()[:10]}"
    temp.mkdir(mode=0o700, exist_ok=True)
    return temp


def temp_left(tmp_path: Path) -> list[Path]:
    """What the test's jobs left in its supervisor's temp (removed now)."""
    temp = Path("/tmp") / f"gx-{hashlib.sha256(bytes(tmp_path)).hexdigest()[:10]}"
    left = sorted(temp.iterdir()) if temp.exists() else []
    shutil.rmtree(temp, ignore_errors=True)
    return left


def jobs_left(tmp: Path, wait_s: float = 30.0) -> list[str]:
    """What the executor jobs of a test (any jobs directory directly under ``tmp``) left
    once it ended: a job still live after ``wait_s``, a process naming a jobs directory (a
    supervisor, its worker, ansible-playbook: ended now), a job's temp the collector did
    not remove. The jobs are collected (keep 0) on the way, so the test leaves none."""
    from gpuboot.executor import jobs, procs

    left: list[str] = []
    for root in sorted({lock.parent for lock in tmp.glob("*/*.lock")}):
        ids = sorted(p.name.removesuffix(".lock") for p in root.iterdir() if p.suffix == ".lock")
        deadline = time.monotonic() + wait_s
        while (live := [i for i in ids if jobs.is_live(jobs.Job(root, i))]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
        left += [f"job {root.name}/{i} still running" for i in live]
        left += [f"process {pid} of {root.name}" for pid in procs.end_marked(str(root))]
        temps = [jobs.recorded(jobs.Job(root, i)).get("temp") for i in ids]
        jobs.collect_garbage(root, keep_s=0)
        left += [f"temp {t} of {root.name}" for t in temps if t and Path(t).exists()]
    return left


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test(request):
    """Every executor job a test started has ended when the test ends, its processes and
    its temp with it (a play through executors once passed while its supervisors ran on
    for hours)."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp = request.getfixturevalue("tmp_path")
    yield
    assert not jobs_left(tmp)
    assert not temp_left(tmp), "a job's temp outlived it"


def write_job(data: Path) -> Path:
    """A private data dir ansible-runner's transmit sends: the plays and a local inventory."""
    (data / "project").mkdir(parents=True)
    (data / "inventory").mkdir()
    for name, text in PLAYS.items():
        (data / "project" / name).write_text(text)
    hosts = "".join(
        f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}\n" for h in HOSTS
    )
    (data / "inventory" / "hosts").write_text(hosts)
    (data / "env").mkdir()  # a secret the job carries, as a real job's keys and passwords
    (data / "env" / "extravars").write_text(f"job_secret: {JOB_SECRET}\n")
    return data


@pytest.fixture
def job_data(tmp_path) -> Path:
    return write_job(tmp_path / "job")


def line(doc: dict) -> bytes:
    return json.dumps(doc).encode() + b"\n"


def event(counter: int, kind: str, host: str | None = None, task: str = "t", **data) -> dict:
    event_data = {"task": task, **data}
    if host:
        event_data["host"] = host
    return {"uuid": f"u{counter}", "counter": counter, "event": kind, "event_data": event_data}


def artifacts_zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buf.getvalue()


def artifacts_unit(files: dict[str, bytes]) -> bytes:
    import base64

    raw = artifacts_zip(files)
    return line({"zipfile": len(raw)}) + base64.b64encode(raw)


def stream(*, rc: int = 0, status: str = "successful", env: dict | None = None) -> bytes:
    """A worker's stream as ansible-runner 2.4 writes it, for one host (h1)."""
    return b"".join(
        [
            line({"status": "starting", "runner_ident": "x", "env": env or {}, "command": []}),
            line({"status": "running", "runner_ident": "x"}),
            line(event(1, "playbook_on_start")),
            line(event(2, "runner_on_ok", "h1", "done")),
            line({"event": "keepalive", "counter": 0, "uuid": 0}),
            line(event(3, "playbook_on_stats", ok={"h1": 1}, changed={}, failures={}, dark={})),
            line({"status": status, "runner_ident": "x"}),
            artifacts_unit({"rc": str(rc).encode(), "status": status.encode()}),
            line({"eof": True}),
        ]
    )


# A channel that replays a recorded stream and exits with the given status (ssh's 255...).
REPLAY = """
import sys
sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())
sys.stdout.flush()
sys.exit(int(sys.argv[2]))
"""
# A channel that sends one line and then neither speaks nor closes: a half-open connection.
HALF_OPEN = """
import sys, time
sys.stdout.write('{"status": "starting", "runner_ident": "x"}\\n')
sys.stdout.flush()
time.sleep(60)
"""
# What ssh is to the supervisor: a relay whose death leaves the remote side running with
# its stdout closed. It writes its pid to argv[1]; the rest is the command it relays.
RELAY = """
import os, subprocess, sys, threading
open(sys.argv[1], 'w').write(str(os.getpid()))
child = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         start_new_session=True)
def feed():
    while chunk := os.read(0, 65536):
        child.stdin.write(chunk); child.stdin.flush()
    child.stdin.close()
threading.Thread(target=feed, daemon=True).start()
while chunk := os.read(child.stdout.fileno(), 65536):
    os.write(1, chunk)
sys.exit(child.wait())
"""


def python_channel(name: str, script: str, *args: str):
    from gpuboot.executor.stream import Executor

    return Executor(name, (sys.executable, "-c", script, *args))


class ShellNode:
    """A direct run's node: this machine's shell with ``bindir`` (the emulator's tools or a
    shim) first on its PATH."""

    def __init__(self, bindir: Path):
        self.env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}

    def run(self, command: str):
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=self.env)
        return SimpleNamespace(rc=out.returncode, stdout=out.stdout, stderr=out.stderr)


def local_supervisor(tmp_path: Path, bindir: Path | None = None):
    """A supervisor on this machine (executor "ex1"), its worker's shell finding ``bindir``'s
    tools first."""
    from gpuboot.executor.stream import Executor

    path = ("env", f"PATH={bindir}:{os.environ['PATH']}") if bindir else ()
    supervisor = (sys.executable, "-m", "gpuboot.executor.supervisor")
    return Executor("ex1", (*path, *supervisor, "--jobs-dir", str(tmp_path / "jobs")))


@pytest.fixture
def wheelhouses_built(tmp_path, monkeypatch) -> list[tuple[str, list[str]]]:
    """wheelhouse.ensure() with no wheel really built: each build recorded as (its key, the
    distributions it packs), leaving the wheelhouse.json ensure reads back."""
    from gpuboot.executor import wheelhouse

    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path))
    monkeypatch.setattr(wheelhouse, "_source_dir", lambda _dist: None)  # no tree to build
    built: list[tuple[str, list[str]]] = []

    def build(dists, trees, files, home: Path, key: str) -> None:
        built.append((key, list(dists)))
        (home / key).mkdir(parents=True)
        doc = {"wheels": ["pip-1-py3-none-any.whl"], "pip": "pip-1-py3-none-any.whl"}
        (home / key / "wheelhouse.json").write_text(json.dumps({**doc, "python": "3.11"}))

    monkeypatch.setattr(wheelhouse, "_build", build)
    return built
