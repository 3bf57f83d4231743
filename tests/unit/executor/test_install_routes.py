"""`gpuboot install` through executors, end to end on local executors: the supervisor as a
local command (its playbooks a small stand-in for install.yml that runs on the executor
itself, `connection: local`), every other part real -- the inventory's checks, the
pre-flight, routing, shards, the merged results, rollout.json, exit codes and --resume."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from gpuboot import cli
from gpuboot.executor import jobs, procs, route, shards
from gpuboot.executor.stream import Executor
from gpuboot.executor.versions import local_versions
from gpuboot.install import FINAL_TASK
from tests.unit.executor.conftest import RELAY, python_channel

pytestmark = pytest.mark.subprocess

# Stands in for the shipped install.yml on the executor: a slow host waits for its gate
# file, every host then reaches install's final task.
PLAY = f"""
- hosts: all
  gather_facts: false
  connection: local
  strategy: free
  tasks:
    - name: started
      ansible.builtin.debug: {{msg: go}}
    - name: wait
      ansible.builtin.wait_for: {{path: "{{{{ gate }}}}", timeout: 60}}
      when: slow | default(false) | bool
    - name: "{FINAL_TASK}"
      ansible.builtin.debug: {{msg: done}}
"""
INVENTORY = """\
all:
  vars:
    gpuboot_profile: hgx-h100-sxm-8gpu
    gpuboot_stack: lts-550-cuda12.4
    ansible_python_interpreter: {python}
    gate: {gate}
  children:
    gpu:
      hosts:
        a1: {{ansible_host: 10.1.0.1, gpuboot_domain: hall-a, slow: true}}
        a2: {{ansible_host: 10.1.0.2, gpuboot_domain: hall-a}}
        b1: {{ansible_host: 10.2.0.1, gpuboot_domain: hall-b}}
    gpuboot_executors:
      hosts:
        ex-a: {{ansible_host: 192.168.0.5, gpuboot_executor_domains: [hall-a]}}
        ex-b: {{ansible_host: 192.168.0.6, gpuboot_executor_domains: [hall-b]}}
"""


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """The inventory, the executors' playbooks and jobs dirs, and the gate a1 waits for
    (opened at the end whatever happened, so no play is left waiting)."""
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    plays = tmp_path / "plays"
    plays.mkdir()
    (plays / "install.yml").write_text(PLAY)
    gate = tmp_path / "gate"
    inv = tmp_path / "inv.yml"
    inv.write_text(INVENTORY.format(python=sys.executable, gate=gate))
    state = {"plays": plays, "gate": gate, "inv": inv, "tmp": tmp_path, "channels": {}}
    yield state
    gate.touch()


def _supervisor(lab, name: str) -> Executor:
    return Executor(
        name,
        (sys.executable, "-m", "gpuboot.executor.supervisor",
         "--jobs-dir", str(lab["tmp"] / f"jobs-{name}"), "--playbooks-dir", str(lab["plays"])),
    )  # fmt: skip


@pytest.fixture
def executors(lab, monkeypatch):
    """route.executor answering with local executors; ``lab["channels"][name]`` replaces
    one executor's channel (a relay, a mute or skewed one)."""

    def local(_inv, name):
        return lab["channels"].get(name) or _supervisor(lab, name)

    monkeypatch.setattr(route, "executor", local)
    return lab


def _install(lab, capsys, *extra: str) -> tuple[int, dict]:
    code = cli.main(["install", "-i", str(lab["inv"]), "--json", "-q", *extra])
    return code, json.loads(capsys.readouterr().out)


def _statuses(doc: dict) -> dict[str, tuple[str, str]]:
    return {h: (r["status"], r["executor"]) for h, r in doc["hosts"].items()}


def _when_a1_waits(lab, then) -> threading.Thread:
    """Run ``then()`` once a1 waits at its gate (its shard's journal says so)."""

    def seen() -> set[tuple[str, str, str]]:
        found = set()
        for journal in (lab["tmp"] / "runs").glob("*-install-*/shards/ex-a-*/journal.jsonl"):
            for line in journal.read_text().splitlines():
                data = json.loads(line).get("d")
                if isinstance(data, dict) and data.get("event"):
                    ev = data.get("event_data") or {}
                    found.add((data["event"], str(ev.get("host")), str(ev.get("task"))))
        return found

    def waiting() -> bool:
        now = seen()  # a1 at its gate, a2 past the final task
        return {("runner_on_start", "a1", "wait"), ("runner_on_ok", "a2", FINAL_TASK)} <= now

    def watch() -> None:
        deadline = time.monotonic() + 120
        while not waiting():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        then()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _job_meta(lab, name: str) -> dict:
    metas = list((lab["tmp"] / f"jobs-{name}").glob("*/meta.json"))
    assert len(metas) == 1
    return json.loads(metas[0].read_text())


def _jobs_kept(lab) -> list[str]:
    """What the executors keep of the run's jobs: nothing once each was read to its end
    (released: its directory, processes and temp gone)."""
    return sorted(str(p.relative_to(lab["tmp"])) for p in lab["tmp"].glob("jobs-*/*"))


def test_hosts_run_on_their_domains_executors_and_say_so(executors, capsys):
    executors["gate"].touch()
    code, doc = _install(executors, capsys)
    assert code == 0
    assert _statuses(doc) == {"a1": ("ok", "ex-a"), "a2": ("ok", "ex-a"), "b1": ("ok", "ex-b")}
    run_dir = Path(doc["run_dir"])
    kept = json.loads((run_dir / "results.json").read_text())
    assert {h: r["executor"] for h, r in kept["hosts"].items()} == {
        "a1": "ex-a", "a2": "ex-a", "b1": "ex-b"
    }  # fmt: skip
    assert {n: s["state"] for n, s in kept["shards"].items()} == {
        "ex-a": "complete", "ex-b": "complete"
    }  # fmt: skip
    rollout = json.loads((run_dir / "rollout.json").read_text())
    assert sorted(rollout["converged"]) == ["a1", "a2", "b1"] and rollout["unknown"] == []
    assert _jobs_kept(executors) == []


def test_serial_batches_span_executors_and_the_budget_is_the_fleets(executors, capsys):
    executors["gate"].touch()
    code, doc = _install(executors, capsys, "--serial", "2")
    assert code == 0
    run_dir = Path(doc["run_dir"])
    # batch 1 (a1, a2) on ex-a, batch 2 (b1) on ex-b: one shard directory each
    assert sorted(p.name for p in (run_dir / "shards").iterdir()) == ["ex-a-1", "ex-b-1"]
    assert (
        json.loads((run_dir / "batch-02" / "results.json").read_text())["hosts"]["b1"]["executor"]
        == "ex-b"
    )


def test_check_and_diff_go_through_the_executors_too(executors, capsys):
    executors["gate"].touch()
    code, doc = _install(executors, capsys, "--check", "--diff")
    assert code == 0 and doc["rollout"]["check"] is True
    assert {r["executor"] for r in doc["hosts"].values()} == {"ex-a", "ex-b"}
    run_dir = Path(doc["run_dir"])
    command = json.loads((run_dir / "shards/ex-a-1/artifacts/job/command").read_text())
    assert {"--check", "--diff"} <= set(command["command"])  # what ran on the executor
    # the shards' events where --diff reads a run's events
    assert list(run_dir.glob("shards/ex-a-1/artifacts/job/job_events/*.json"))
    assert (run_dir / "diff.txt").is_file()


def test_a_killed_supervisor_leaves_its_unfinished_hosts_unknown_exit_8_and_resume_runs_them(
    executors, capsys
):
    def kill() -> None:
        os.kill(_job_meta(executors, "ex-a")["supervisor_pid"], signal.SIGKILL)

    watcher = _when_a1_waits(executors, kill)
    code, doc = _install(executors, capsys)
    watcher.join(5)
    assert code == 8
    # a2 had reached the final task before the loss; b1's executor went on
    assert _statuses(doc) == {
        "a1": ("unknown", "ex-a"),
        "a2": ("ok", "ex-a"),
        "b1": ("ok", "ex-b"),
    }
    reason = doc["hosts"]["a1"]["reason"]
    assert "executor ex-a: shard lost" in reason and f"--resume {doc['run_id']}" in reason
    assert doc["rollout"]["unknown"] == ["a1"] and doc["rollout"]["failed"] == []
    rollout = json.loads((Path(doc["run_dir"]) / "rollout.json").read_text())
    assert rollout["unknown"] == ["a1"] and sorted(rollout["converged"]) == ["a2", "b1"]

    executors["gate"].touch()
    code, again = _install(executors, capsys, "--resume")
    assert code == 0
    assert _statuses(again) == {"a1": ("ok", "ex-a")}  # only the host not known done
    assert again["resumed_from"] == doc["run_id"]
    # and a re-run after it changes nothing
    code, last = _install(executors, capsys)
    assert code == 0 and {r["changed"] for r in last["hosts"].values()} == {0}


def test_a_shard_whose_ssh_died_finishes_into_the_spool_and_resume_reads_it(executors, capsys):
    pidfile = executors["tmp"] / "relay.pid"
    supervisor = _supervisor(executors, "ex-a")
    executors["channels"]["ex-a"] = python_channel("ex-a", RELAY, str(pidfile), *supervisor.argv)

    def cut_ssh() -> None:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the executor goes on

    watcher = _when_a1_waits(executors, cut_ssh)
    code, doc = _install(executors, capsys)
    watcher.join(5)
    assert code == 8 and doc["hosts"]["a1"]["status"] == "unknown"

    _a1_finishes_into_the_spool_and_resume_reads_it(executors, capsys)


def _a1_finishes_into_the_spool_and_resume_reads_it(lab, capsys) -> None:
    """a1's gate opened: its job finishes on ex-a into the spool; then --resume reads a1
    from there (it starts no shard) and the executor drops the job."""
    lab["gate"].touch()
    job = jobs.Job(lab["tmp"] / "jobs-ex-a", _job_meta_id(lab, "ex-a"))
    deadline = time.monotonic() + 60
    while jobs.is_live(job):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    lab["channels"].pop("ex-a", None)
    code, again = _install(lab, capsys, "--resume")
    assert code == 0
    assert _statuses(again) == {"a1": ("ok", "ex-a")}
    assert again["rollout"]["converged"] == ["a1"]
    assert not (Path(again["run_dir"]) / "shards").exists()  # read from the spool, not re-run
    assert not job.spool.exists()  # released once read


def _job_meta_id(lab, name: str) -> str:
    (meta,) = (lab["tmp"] / f"jobs-{name}").glob("*/meta.json")
    return meta.parent.name


# Keepalives every second and a short heartbeat, so a silent executor is lost in seconds.
HEARTBEAT_S = 6.0


def _freeze(root: int, frozen: list[int]) -> None:
    """SIGSTOP ``root`` and every process under it, as `podman pause` freezes a host: each
    stopped one is added to ``frozen`` (for the caller's SIGCONT), until none is left running
    (a process stopped in the middle of a fork may leave a child to stop)."""
    os.kill(root, signal.SIGSTOP)
    frozen.append(root)
    while True:
        running = [
            pid for pid in procs.descendants(root)
            if (info := procs._stat(str(pid))) is not None and info[2] not in "Tt"
        ]  # fmt: skip
        if not running:
            return
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
        time.sleep(0.05)


def test_a_paused_executor_is_lost_within_the_heartbeat_and_resume_reads_its_spool(
    executors, capsys, monkeypatch
):
    """ex-a's whole job frozen (its hall's management host paused) while a1 waits at its
    gate: the controller hangs on nothing, the shard is lost within the heartbeat; once the
    host runs again the job finishes into the spool, where --resume reads it."""
    build_job = shards.build_job
    monkeypatch.setattr(
        shards,
        "build_job",
        lambda *a, **kw: build_job(*a, **kw, keepalive_s=1, heartbeat_s=HEARTBEAT_S),
    )
    pidfile = executors["tmp"] / "relay.pid"  # the controller's ssh, which is not paused
    supervisor = _supervisor(executors, "ex-a")
    executors["channels"]["ex-a"] = python_channel("ex-a", RELAY, str(pidfile), *supervisor.argv)
    frozen: list[int] = []
    box: dict = {}

    def install() -> None:
        box["code"], box["doc"] = _install(executors, capsys)

    try:
        watcher = _when_a1_waits(
            executors, lambda: _freeze(_job_meta(executors, "ex-a")["supervisor_pid"], frozen)
        )
        installing = threading.Thread(target=install, daemon=True)
        installing.start()
        watcher.join(150)
        assert frozen, "the job was not frozen"
        installing.join(HEARTBEAT_S + 10)  # the silence noticed, nothing waited on
        assert not installing.is_alive(), "the controller waits on the paused executor"
        code, doc = box["code"], box["doc"]
        assert code == 8
        assert _statuses(doc) == {"a1": ("unknown", "ex-a"), "a2": ("ok", "ex-a"),
                                  "b1": ("ok", "ex-b")}  # fmt: skip
        assert "went silent" in doc["hosts"]["a1"]["reason"]

        # resumed while the job is still frozen (its executor answers): a1 is left alone,
        # never started a second time beside the job that still holds it
        code, early = _install(executors, capsys, "--resume")
        assert code == 8
        assert _statuses(early) == {"a1": ("unknown", "ex-a")}
        reason = early["hosts"]["a1"]["reason"]
        assert "still running in job" in reason and "--resume" in reason, reason
        assert _job_meta(executors, "ex-a")  # still the one job: nothing new started
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    _a1_finishes_into_the_spool_and_resume_reads_it(executors, capsys)
    code, last = _install(executors, capsys)
    assert code == 0 and {r["changed"] for r in last["hosts"].values()} == {0}


# Forwards the supervisor's stream up to a byte count, then ends as if all was said.
CUT = """
import os, subprocess, sys
limit = int(sys.argv[1])
child = subprocess.Popen(sys.argv[2:], stdin=0, stdout=subprocess.PIPE, start_new_session=True)
sent = 0
while sent < limit and (chunk := os.read(child.stdout.fileno(), min(65536, limit - sent))):
    os.write(1, chunk)
    sent += len(chunk)
sys.exit(0)
"""


def test_a_stream_cut_short_is_lost_never_successful(executors, capsys):
    executors["gate"].touch()
    supervisor = _supervisor(executors, "ex-b")
    executors["channels"]["ex-b"] = python_channel("ex-b", CUT, "600", *supervisor.argv)
    code, doc = _install(executors, capsys)
    assert code == 8
    assert doc["hosts"]["b1"]["status"] == "unknown"
    assert "stream" in doc["hosts"]["b1"]["reason"]
    assert {doc["hosts"][h]["status"] for h in ("a1", "a2")} == {"ok"}


def test_an_executor_that_does_not_answer_leaves_its_hosts_unknown_the_rest_proceed(
    executors, capsys
):
    executors["gate"].touch()
    executors["channels"]["ex-b"] = Executor(
        "ex-b", (sys.executable, "-c", "import sys; sys.exit(255)")
    )
    code, doc = _install(executors, capsys)
    assert code == 8
    assert doc["hosts"]["b1"]["status"] == "unknown"
    assert "did not answer" in doc["hosts"]["b1"]["reason"]
    assert not (Path(doc["run_dir"]) / "shards" / "ex-b-1").exists()  # never ran from anywhere
    assert {doc["hosts"][h]["status"] for h in ("a1", "a2")} == {"ok"}


def test_a_skewed_executor_is_refused_before_any_host(executors, capsys):
    skewed = {**local_versions(), "ansible-core": "2.15.0"}
    executors["channels"]["ex-b"] = Executor(
        "ex-b", (sys.executable, "-c", f"print({json.dumps(skewed)!r})")
    )
    code, doc = _install(executors, capsys)
    assert code == 2
    assert "executor ex-b runs other versions" in doc["error"]["message"]
    runs = executors["tmp"] / "runs"
    assert not runs.exists() or not list(runs.glob("*-install-*"))
    assert not (executors["tmp"] / "jobs-ex-a").exists()  # no job started anywhere


def test_mitogen_drives_the_play_on_the_executors_too(executors, capsys):
    """The executor's ansible-playbook runs under mitogen's strategy: a strategy only
    mitogen ships (Ansible refuses an unknown one), the play naming none of its own."""
    pytest.importorskip("ansible_mitogen")
    (executors["plays"] / "install.yml").write_text(
        PLAY.replace("  strategy: free\n", "").replace(
            "ansible.builtin.debug: {msg: go}",
            "ansible.builtin.debug: {msg: \"{{ lookup('env', 'ANSIBLE_STRATEGY') }}\"}",
        )
    )
    executors["gate"].touch()
    code, doc = _install(executors, capsys, "--strategy", "mitogen")
    assert code == 0
    assert _statuses(doc) == {"a1": ("ok", "ex-a"), "a2": ("ok", "ex-a"), "b1": ("ok", "ex-b")}
    said = set()
    for journal in Path(doc["run_dir"]).glob("shards/*/journal.jsonl"):
        for line in journal.read_text().splitlines():
            event = json.loads(line).get("d")
            if isinstance(event, dict) and event.get("event") == "runner_on_ok":
                data = event.get("event_data") or {}
                if data.get("task") == "started":
                    said.add(data["res"]["msg"])
    assert said == {"mitogen_linear"}
    assert _jobs_kept(executors) == []  # every job ended, none hung on mitogen's socket
