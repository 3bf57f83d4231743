"""One host or one bad file never kills the run.

An unreachable host is a result, not a crash; a malformed record under runs/ or in the
scan history is skipped with a warning naming the file and line; the controller's own
state directory being unusable is a clear error, never a traceback; Ctrl-C ends the play
and keeps what was done; and an unreachable node's findings carry a short reason.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

from gpuboot import cli, install, paths, plan, rollout, runner, scan
from gpuboot.errors import BadInput, GpubootError, RunError
from gpuboot.results import RunReport
from tests.unit.plan_answer import answer

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

PINS = (
    "gpuboot_profile: hgx-h100-sxm-8gpu, "
    "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1"
)
SCRIPT = "#!/bin/sh\n# the collection script\n" + "echo probe\n" * 600  # about 6 KB, as certify's
REFUSED = "ssh: connect to host 192.0.2.9 port 22: Connection refused"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private GPUBOOT_HOME (and runs dir under it) for the test."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "home" / "runs"))
    return tmp_path / "home"


def _inventory(tmp_path, hosts=("n1", "n2")) -> Path:
    path = tmp_path / "inv.yml"
    lines = "".join(f"    {h}: {{ansible_host: 192.0.2.{i + 1}}}\n" for i, h in enumerate(hosts))
    path.write_text(f"all:\n  vars: {{{PINS}}}\n  hosts:\n{lines}")
    return path


def _ssh_failure(command: str, stderr: str) -> RuntimeError:
    """What testinfra's ssh backend raises when ssh itself fails (exit 255)."""
    result = CommandResult(LocalBackend(), 255, command.encode(), b"", stderr.encode())
    return RuntimeError(result)


class FakeHost:
    """A testinfra host: answers dpkg-query, or fails as ssh does when unreachable."""

    def __init__(self, name: str, reachable: bool):
        self.name, self.reachable = name, reachable
        self.backend = type("B", (), {"get_hostname": lambda _s: name, "NAME": "ssh"})()

    def run(self, command):
        if not self.reachable:
            raise _ssh_failure(
                command, f"Warning: Permanently added 'x' (ED25519)\r\n{REFUSED}\r\n"
            )
        out = answer("nvidia-driver-550\t550.54.15-1\tii \nnvidia-dkms-550\t550.40.07-1\tii \n")
        return CommandResult(LocalBackend(), 0, command.encode(), out.encode(), b"")


# ---------------------------------------------------------------- plan: one unreachable host
def test_plan_reports_an_unreachable_host_and_plans_the_others(tmp_path, monkeypatch, capsys):
    from gpuboot import transport

    inv = _inventory(tmp_path)
    fake = {"n1": FakeHost("n1", reachable=False), "n2": FakeHost("n2", reachable=True)}
    monkeypatch.setattr(transport, "connect", lambda name, *_a: fake[name])
    doc = plan.plan(str(inv))
    n1, n2 = doc["nodes"]
    assert n1["host"] == "n1" and n1["unreachable"] is True
    assert n1["error"] == f"unreachable: {REFUSED}"  # the last meaningful ssh line, no script
    assert n2["changes"] == 3 and n2["reboot"] is True  # the other host is still planned
    # through the CLI: the unreachable host reported, the other planned, exit 1
    assert cli.main(["plan", "-i", str(inv)]) == 1
    out = capsys.readouterr().out
    assert f"n1: ERROR unreachable: {REFUSED}" in out and "nvidia-dkms-550" in out


# ---------------------------------------------------------------- rollout.json records
def _state(inventory: Path, **over) -> dict:
    doc = {
        "inventory": str(inventory.resolve()),
        "hosts": ["n1", "n2", "n3"],
        "batch_size": 1,
        "budget": None,
        "check": False,
        "converged": ["n1"],
        "failed": ["n2"],
        "pending": ["n3"],
        "stopped": None,
    }
    doc.update(over)
    return doc


BAD_RECORDS = {
    "20260105T000000-install-notjsn": b'{"inventory": "x", "hosts": [',
    "20260106T000000-install-types1": "types",
    "20260107T000000-install-missng": "missing",
    "20260108T000000-install-latin1": b'{"inventory": "caf\xe9"}',
    "20260109T000000-install-notobj": b"[1, 2, 3]",
}


def _write_runs(runs: Path, inv: Path) -> None:
    good = runs / "20260101T000000-install-good01"
    good.mkdir(parents=True)
    (good / "rollout.json").write_text(json.dumps(_state(inv)))
    for run_id, content in BAD_RECORDS.items():
        (runs / run_id).mkdir()
        if content == "types":
            content = json.dumps(_state(inv, failed="n2")).encode()
        elif content == "missing":
            doc = _state(inv)
            del doc["pending"]
            content = json.dumps(doc).encode()
        (runs / run_id / "rollout.json").write_bytes(content)


def test_resume_skips_malformed_rollout_records_with_a_warning_naming_each(tmp_path, home):
    inv = _inventory(tmp_path)
    runs = paths.runs_dir()
    _write_runs(runs, inv)
    warnings: list[str] = []
    found = rollout.resume_from(inv, "latest", warn=warnings.append)
    assert (found.run_id, found.hosts) == ("20260101T000000-install-good01", ["n2", "n3"])
    assert len(warnings) == len(BAD_RECORDS)
    for run_id in BAD_RECORDS:
        assert any(str(runs / run_id / "rollout.json") in w for w in warnings), run_id
    text = "\n".join(warnings)
    assert "line 1, column" in text  # where the JSON breaks
    assert "'failed'" in text and "'pending'" in text  # the key that is wrong or missing
    assert "UTF-8" in text


def test_resume_of_a_named_malformed_run_is_bad_input_naming_the_file(tmp_path, home):
    inv = _inventory(tmp_path)
    _write_runs(paths.runs_dir(), inv)
    with pytest.raises(BadInput) as exc:
        rollout.resume_from(inv, "20260106T000000-install-types1")
    assert exc.value.where.endswith("20260106T000000-install-types1/rollout.json")
    assert "'failed'" in exc.value.message


def test_resume_refuses_a_run_id_that_is_a_path(tmp_path, home):
    inv = _inventory(tmp_path)
    with pytest.raises(BadInput, match="not a run id"):
        rollout.resume_from(inv, "../../etc")


# ---------------------------------------------------------------- scan history lines
def test_history_skips_bad_lines_with_file_and_line_named(tmp_path):
    path = tmp_path / "scan-history.jsonl"
    good = {"time": "2026-11-23T10:00:00Z", "host": "n1", "verdict": "FAIL", "failing": {}}
    lines = [
        json.dumps(good).encode(),
        b"not json at all",
        json.dumps({"time": "t", "host": "n2", "verdict": "PASS"}).encode(),  # no failing
        json.dumps({"time": "t", "host": "n2", "failing": ["NVL-001"]}).encode(),  # wrong type
        json.dumps({"time": 5, "host": "n2", "failing": {}}).encode(),  # wrong type
        b'{"time": "t", "host": "n\xff2", "failing": {}}',  # not UTF-8
        json.dumps({**good, "time": "2026-11-23T11:00:00Z", "failing": {"A": "FAIL"}}).encode(),
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    warnings: list[str] = []
    last = scan.last_records(path, warn=warnings.append)
    assert set(last) == {"n1"} and last["n1"]["failing"] == {"A": "FAIL"}
    assert [w.split(": ")[0] for w in warnings] == [f"{path}:{n}" for n in (2, 3, 4, 5, 6)]
    assert "'failing'" in warnings[1] and "UTF-8" in warnings[4]
    # and a scan over such a history still works: the bad lines are not its "previous scan"
    assert scan.drift({}, last.get("n2")).to_dict() == {
        "previous_scan": None,
        "new": [],
        "still": [],
        "cleared": [],
    }


def _fake_certify(verdicts, delay=0.0):
    def certify(inventory, **_kw):
        time.sleep(delay)
        nodes = [
            {"host": h, "verdict": v, "findings": [{"rule": "NVL-001", "status": v}]}
            for h, v in verdicts.items()
        ]
        return RunReport.from_dict({"run_id": "r", "run_dir": "d", "nodes": nodes})

    return certify


def test_scan_warns_about_a_bad_history_line_through_its_progress(tmp_path, monkeypatch):
    from gpuboot import certify

    history = tmp_path / "h.jsonl"
    history.write_bytes(b'{"time": "t", "host": "n1"}\n')  # no failing: broke every later scan
    monkeypatch.setattr(certify, "certify", _fake_certify({"n1": "FAIL"}))
    said: list[str] = []
    report = scan.scan(str(tmp_path / "inv.yml"), history=history, progress=said.append).to_dict()
    assert report["nodes"][0]["drift"]["new"] == ["NVL-001"]
    assert any(f"{history}:1" in m and "'failing'" in m for m in said)


def test_an_unusable_history_is_refused_before_any_host(tmp_path, monkeypatch):
    from gpuboot import certify

    blocker = tmp_path / "file"
    blocker.write_text("x")
    called = []
    monkeypatch.setattr(certify, "certify", lambda *a, **k: called.append(a))
    with pytest.raises(BadInput) as exc:
        scan.scan(str(tmp_path / "inv.yml"), history=blocker / "scan-history.jsonl")
    assert called == [] and "--history" in exc.value.hint
    assert str(blocker) in exc.value.where and "File exists" in exc.value.message


# ---------------------------------------------------------------- the controller's own state
@pytest.mark.parametrize("var", ["GPUBOOT_HOME", "GPUBOOT_RUNS"])
def test_a_state_variable_set_but_empty_is_bad_input_naming_it(var, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path))
    monkeypatch.setenv(var, "")
    with pytest.raises(BadInput) as exc:
        paths.runs_dir() if var == "GPUBOOT_RUNS" else paths.home()
    assert var in str(exc.value) and "empty" in exc.value.message


def test_empty_home_is_bad_input_not_state_under_slash(monkeypatch):
    monkeypatch.delenv("GPUBOOT_HOME", raising=False)
    monkeypatch.setenv("HOME", "")
    with pytest.raises(BadInput) as exc:
        paths.home()
    assert "HOME" in exc.value.message and "GPUBOOT_HOME" in exc.value.hint


def test_run_dir_under_a_file_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # root ignores modes; a path under a regular file fails for all
    monkeypatch.setenv("GPUBOOT_RUNS", str(blocker / "runs"))
    with pytest.raises(BadInput) as exc:
        runner.new_run_dir("certify")
    assert str(blocker / "runs") in str(exc.value) and "Not a directory" in exc.value.message
    assert "GPUBOOT_RUNS" in exc.value.hint


@pytest.mark.parametrize(
    ("code", "kind", "words"),
    [(errno.ENOSPC, RunError, "disk full"), (errno.EROFS, BadInput, "Read-only file system")],
)
def test_full_or_read_only_home_is_named(code, kind, words, home, monkeypatch):
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, **kw):
        if "install" in str(path):
            raise OSError(code, os.strerror(code), str(path))
        return real_mkdir(path, mode, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(kind) as exc:
        runner.new_run_dir("install")
    assert words in exc.value.message and str(paths.runs_dir()) in exc.value.where


def test_run_dirs_and_records_are_private(tmp_path, home):
    _run_id, run_dir = runner.new_run_dir("install")
    state = rollout.RolloutState("inv", ["n1"], 1, None)
    state.save(run_dir)
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "rollout.json").stat().st_mode) == 0o600


def test_cli_turns_an_unwritable_gen_key_path_into_a_message(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = cli.main(["certify", "--gen-key", str(blocker / "keys" / "signing.pem")])
    err = capsys.readouterr().err
    assert code in (2, 3) and "Traceback" not in err
    assert str(blocker / "keys") in err and "Not a directory" in err


def test_cli_names_a_full_disk(monkeypatch, capsys):
    def full(_args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/var/lib/x/report.json")

    from gpuboot.cli import evaluate

    monkeypatch.setattr(evaluate, "run", full)  # register looks it up at each parser build
    code = cli.main(["evaluate", "--bundle", "b"])
    err = capsys.readouterr().err
    assert code == 3 and "disk full" in err and "/var/lib/x/report.json" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------- Ctrl-C
def _played(run_id, run_dir, hosts):
    return runner.PlayResult(
        run_id, run_dir, 0, "successful", 1.0, {h: runner.HostResult(h, ok=3) for h in hosts}
    )


def test_interrupted_install_keeps_finished_batches_and_resumes_the_rest(
    tmp_path, home, monkeypatch, capsys
):
    inv = _inventory(tmp_path, hosts=("n1", "n2", "n3"))
    calls = []

    def fake_run(spec, _show, into):
        calls.append(spec.limit)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C during batch 2
        return _played(*into, spec.limit.split(","))

    monkeypatch.setattr(install, "run", fake_run)
    with pytest.raises(KeyboardInterrupt) as exc:
        install.install(str(inv), serial="1")
    assert "--resume" in str(exc.value)
    [run_dir] = [p for p in paths.runs_dir().iterdir() if "-install-" in p.name]
    state = json.loads((run_dir / "rollout.json").read_text())
    assert state["converged"] == ["n1"] and state["failed"] == []
    assert state["pending"] == ["n2", "n3"] and "interrupted" in state["stopped"]
    found = rollout.resume_from(inv, "latest")
    assert (found.run_id, found.hosts) == (run_dir.name, ["n2", "n3"])
    # through the CLI: exit 130 and how to go on, not a traceback
    calls.clear()
    assert cli.main(["install", "-i", str(inv), "--serial", "1", "-q"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume" in err and "Traceback" not in err


LOCAL_PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - name: a quick task
      ansible.builtin.command: "true"
      changed_when: false
    - name: a long task
      ansible.builtin.command: sleep {marker}
"""


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            found.append(int(pid))
    return found


def test_ctrl_c_during_a_play_ends_ansible_playbook_and_raises_keyboard_interrupt(
    tmp_path, home, monkeypatch
):
    """A real ansible-playbook on localhost (connection local), a real SIGINT."""
    marker = f"{97 + os.getpid() % 1000}.{time.time_ns() % 10**6:06d}"
    play = tmp_path / "play.yml"
    play.write_text(LOCAL_PLAY.format(marker=marker))
    inv = tmp_path / "local.yml"
    inv.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    # The killed task leaves AnsiballZ's payload directory behind: keep it in this test's
    # own directory, not the controller's /tmp.
    controller_tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    payloads_before = set(controller_tmp.glob("ansible_*_payload_*"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    closed = []
    monkeypatch.setattr(runner, "close_ssh_masters", lambda cp: closed.append(cp))
    ended = []
    sweep = runner.end_play_processes
    monkeypatch.setattr(runner, "end_play_processes", lambda d: ended.extend(sweep(d)))
    before = signal.getsignal(signal.SIGINT)

    def interrupt_once_running():
        deadline = time.monotonic() + 60
        while not _processes_with(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_running, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt) as stopped:
        runner.run(runner.RunSpec(playbook=play, inventory=(inv,), label="ctrlc"))
    assert time.monotonic() - started < 60
    # ok in its first task, stopped in its second: not known to be ok
    run_dir = Path(str(stopped.value).rpartition("see ")[2])
    results = json.loads((run_dir / "results.json").read_text())
    assert results["hosts"]["localhost"]["status"] == "interrupted", results
    time.sleep(0.5)
    # ansible-playbook, its workers (each in a session of its own) and the task are gone
    assert _processes_with(marker) == [] and _processes_with(str(play)) == []
    assert closed == [runner.control_dir(run_dir)]  # the run's ssh masters were asked to exit
    assert ended  # the worker runner's cancel leaves behind (and its task) had to be ended
    assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C works again afterwards
    assert set(controller_tmp.glob("ansible_*_payload_*")) == payloads_before


def test_certify_interrupted_raises_keyboard_interrupt_without_blaming_limit(
    tmp_path, home, monkeypatch
):
    """A run whose collection is interrupted: not "the check run broke (--limit)"."""
    from gpuboot import certify, transport

    class Interrupted:
        def run(self, _command):
            raise KeyboardInterrupt

    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Interrupted())
    with pytest.raises(KeyboardInterrupt) as exc:
        certify.certify(str(_inventory(tmp_path)))
    assert "--limit" not in str(exc.value) and "certify" in str(exc.value)


# ---------------------------------------------------------------- ssh masters
MUX_MASTER = r"""
import os, socket, struct, sys
path, obey = sys.argv[1], sys.argv[2] == "obey"
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(4)
print("ready", flush=True)

def packet(conn):
    head = conn.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        return None
    return conn.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL)

def send(conn, *words):
    body = struct.pack(">%dI" % len(words), *words)
    conn.sendall(struct.pack(">I", len(body)) + body)

while True:
    conn, _ = srv.accept()
    send(conn, 0x00000001, 4)              # MUX_MSG_HELLO, version 4
    packet(conn)                            # the client's hello
    msg = packet(conn)
    if not msg:
        continue
    kind, rid = struct.unpack(">II", msg[:8])
    if kind == 0x10000004:                  # MUX_C_ALIVE_CHECK -> MUX_S_ALIVE, pid
        send(conn, 0x80000005, rid, os.getpid())
    elif kind == 0x10000005 and obey:       # MUX_C_TERMINATE -> MUX_S_OK, then exit
        send(conn, 0x80000001, rid)
        conn.close()
        os.unlink(path)
        sys.exit(0)
    conn.close()                            # a master that does not take the request
"""


def _fake_master(cp: Path, obey: bool) -> subprocess.Popen:
    """A process answering OpenSSH's ControlMaster protocol (PROTOCOL.mux) on a socket in
    the run's control dir, as `ssh -o ControlPersist` leaves one; the real `ssh -O` talks
    to it. It stands in for the master only: no remote host is involved."""
    cp.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", MUX_MASTER, str(cp / "0123abcd"), "obey" if obey else "stuck"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.mark.skipif(not Path("/usr/bin/ssh").exists(), reason="needs the OpenSSH client")
@pytest.mark.parametrize("obey", [True, False], ids=["exit-request", "stuck-master"])
def test_close_ssh_masters_ends_every_master(tmp_path, obey):
    master = _fake_master(tmp_path / "cp", obey)
    try:
        runner.close_ssh_masters(tmp_path / "cp")
        assert master.wait(timeout=15) is not None  # the master is gone either way
    finally:
        if master.poll() is None:
            master.kill()


def test_close_ssh_masters_survives_a_hung_or_missing_ssh(tmp_path, monkeypatch):
    cp = tmp_path / "cp"
    cp.mkdir()
    for name in ("a", "b"):
        (cp / name).write_text("")  # not sockets: nothing to ask
    asked = []

    def hung(cmd, **_kw):
        asked.append(cmd)
        raise subprocess.TimeoutExpired(cmd, 10)

    monkeypatch.setattr(runner, "_is_socket", lambda _p: True)
    monkeypatch.setattr(subprocess, "run", hung)
    runner.close_ssh_masters(cp)  # no exception: every socket was tried
    assert {Path(c[2].split("=", 1)[1]).name for c in asked} == {"a", "b"}


# ---------------------------------------------------------------- unreachable node's reason
def test_end_play_processes_finds_a_play_by_its_environment(tmp_path):
    """A process in a session of its own (as ansible's workers are) carrying the run's
    control path dir in its environment is ended; one of another run is left alone."""
    mine, other = tmp_path / "run-a", tmp_path / "run-b"

    def start(run_dir):
        env = {**os.environ, "ANSIBLE_SSH_CONTROL_PATH_DIR": str(runner.control_dir(run_dir))}
        return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)

    a, b = start(mine), start(other)
    try:
        time.sleep(0.2)
        assert runner.end_play_processes(mine) == [a.pid]
        assert a.wait(timeout=10) == -signal.SIGTERM and b.poll() is None
    finally:
        for proc in (a, b):
            proc.kill()
            proc.wait()


def test_unreachable_node_reason_is_short_and_never_the_script(monkeypatch):
    from gpuboot import node_collect

    monkeypatch.setattr(node_collect, "script", lambda *_a, **_k: SCRIPT)
    with pytest.raises(node_collect.HostUnreachable) as exc:
        node_collect.collect_node("n1", FakeHost("n1", reachable=False), _pins())
    text = str(exc.value)
    assert REFUSED in text and "echo probe" not in text and len(text) < 400


def _pins():
    return {
        "gpuboot_profile": "hgx-h100-sxm-8gpu",
        "nvidia_driver_branch": "550",
        "nvidia_driver_version": "550.54.15-1",
    }


@pytest.mark.parametrize(
    "exc",
    [
        _ssh_failure(SCRIPT, f"{REFUSED}\n"),
        GpubootError("evidence collection failed\n" + "x" * 5000, where="n1"),
    ],
)
def test_failure_reason_is_one_short_line(exc):
    reason = runner.failure_reason(exc)
    assert len(reason) <= runner.REASON_MAX and "\n" not in reason
    assert "echo probe" not in reason
