"""Concurrency: one mutating run per machine, scan history appends
serialised. Contention is real: other processes hold the flocks."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from gpuboot import cli, install, locks, paths, scan
from gpuboot.errors import BadInput
from gpuboot.results import RunReport

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FORK = multiprocessing.get_context("fork")
PINS = (
    "{gpuboot_profile: hgx-h100-sxm-8gpu, "
    "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1}"
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "home" / "runs"))
    return tmp_path / "home"


def _inventory(tmp_path: Path, name: str = "inv.yml", hosts=("n1", "n2")) -> Path:
    path = tmp_path / name
    body = "".join(f"    {h}: {{ansible_host: 192.0.2.{i + 1}}}\n" for i, h in enumerate(hosts))
    path.write_text(f"all:\n  vars: {PINS}\n  hosts:\n{body}")
    return path


def _holder(hosts, verb, run_id, ready, done):
    with locks.hold(hosts, verb):
        locks.note_run(run_id)
        ready.set()
        done.wait(60)


class Holder:
    """Another process holding machine locks until told to let go (or killed)."""

    def __init__(
        self, hosts: dict[str, str], verb="install", run_id="20261124T010000-install-abc123"
    ):
        self.ready, self.done = FORK.Event(), FORK.Event()
        self.proc = FORK.Process(target=_holder, args=(hosts, verb, run_id, self.ready, self.done))

    def __enter__(self) -> Holder:
        self.proc.start()
        assert self.ready.wait(30), "the holder never took its locks"
        return self

    def __exit__(self, *_exc) -> None:
        self.done.set()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()


M1, M2, M3 = "192.0.2.1:22", "192.0.2.2:22", "192.0.2.3:22"


def test_a_second_run_on_a_held_machine_is_refused_naming_the_holder(home):
    with Holder({"n1": M1, "n2": M2}) as other:
        with pytest.raises(BadInput) as exc, locks.hold({"n2": M2, "n3": M3}, "certify"):
            pass
        message = exc.value.message
        assert message.startswith("n2 is in use by gpuboot install")
        assert "run 20261124T010000-install-abc123" in message
        assert f"pid {other.proc.pid}" in message and "since 20" in message
        assert exc.value.exit_code == 2 and exc.value.hint
        # all or nothing: the refused run let go of n3 again
        with locks.hold({"n3": M3}, "certify"):
            pass
    with locks.hold({"n1": M1, "n2": M2}, "certify"):  # free once the holder ended
        pass


def test_a_killed_holder_leaves_no_stale_lock(home):
    holder = Holder({"n1": M1})
    holder.__enter__()
    os.kill(holder.proc.pid, signal.SIGKILL)
    holder.proc.join(10)
    with locks.hold({"n1": M1}, "install"):  # the kernel released the flock
        pass


def test_the_same_machine_under_two_names_is_one_lock(home):
    refused = pytest.raises(BadInput, match="gpu-b is in use")
    with Holder({"gpu-a": "192.0.2.1:22"}), refused, locks.hold({"gpu-b": "192.0.2.1:22"}, "x"):
        pass
    assert locks.machine("n1", {"ansible_host": "10.0.0.5", "ansible_port": 2222}) == (
        "10.0.0.5:2222"
    )
    assert locks.machine("n1", {}) == "n1:22"


def test_lock_files_stay_inside_the_locks_dir(home):
    hostile = {"../../etc/x": "../../etc/x:22", "a b\n;c": "a b\n;c:22"}
    with locks.hold(hostile, "install"):
        made = sorted(p.name for p in (home / "locks").iterdir())
    assert len(made) == 2 and all("/" not in n and "\n" not in n for n in made)
    assert not (home.parent / "etc").exists()
    assert oct((home / "locks").stat().st_mode & 0o777) == "0o700"


def test_install_on_a_held_host_is_refused_before_anything_runs(tmp_path, home, monkeypatch):
    inv = _inventory(tmp_path)
    plays = []
    monkeypatch.setattr(install, "run", lambda *a, **k: plays.append(a))
    holder = Holder({"n2": M2}, verb="certify", run_id="20261124T010000-certify-def456")
    with holder, pytest.raises(BadInput) as exc:
        install.install(str(inv))
    assert "n2 is in use by gpuboot certify (run 20261124T010000-certify-def456" in str(exc.value)
    assert plays == []
    runs = paths.runs_dir()
    assert not runs.exists() or not any("-install-" in p.name for p in runs.iterdir())


@pytest.mark.parametrize("verb", ["certify", "scan"])
def test_certify_and_scan_on_a_held_host_exit_2_before_any_check(
    verb, tmp_path, home, monkeypatch, capsys
):
    from gpuboot import certify

    inv = _inventory(tmp_path)
    called = []
    monkeypatch.setattr(certify, "certify", lambda *a, **k: called.append(a))
    with Holder({"n1": M1}):
        code = cli.main([verb, "-i", str(inv), "--json"])
    assert code == 2 and called == []
    error = json.loads(capsys.readouterr().out)["error"]
    assert "n1 is in use by gpuboot install" in error["message"]


@pytest.mark.parametrize("verb", ["certify", "scan"])
def test_a_bad_kubeconfig_is_refused_before_any_host(verb, tmp_path, home, monkeypatch, capsys):
    from gpuboot import certify

    inv = _inventory(tmp_path)
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: 17\n")
    called = []
    monkeypatch.setattr(certify, "certify", lambda *a, **k: called.append(a))
    code = cli.main([verb, "-i", str(inv), "--kubeconfig", str(bad), "--json"])
    assert code == 2 and called == []  # no node collected or probed first
    error = json.loads(capsys.readouterr().out)["error"]
    assert "kubeconfig" in error["message"] and error["where"] == str(bad)


def _scan_once(inventory, history, barrier, results):
    from gpuboot import certify

    def slow_certify(*_a, **_k):
        import time

        time.sleep(0.3)  # every scan is probing when the others read the history
        node = {"host": "n1", "verdict": "FAIL", "findings": [{"rule": "X", "status": "FAIL"}]}
        return RunReport.from_dict({"run_id": f"r{os.getpid()}", "run_dir": "d", "nodes": [node]})

    certify.certify = slow_certify
    barrier.wait(30)
    report = scan.scan(inventory, history=Path(history)).to_dict()
    results.put(report["nodes"][0]["drift"]["previous_scan"])


def test_concurrent_scans_each_see_the_one_before(tmp_path):
    history = tmp_path / "scan-history.jsonl"
    barrier, results = FORK.Barrier(3), FORK.Queue()
    procs = [
        FORK.Process(
            target=_scan_once, args=(str(tmp_path / "inv.yml"), str(history), barrier, results)
        )
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    previous = [results.get(timeout=5) for _ in procs]
    assert previous.count(None) == 1  # one first scan; the others saw a previous one
    lines = history.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["host"] == "n1" for line in lines)
