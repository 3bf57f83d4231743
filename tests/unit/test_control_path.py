"""Where a run's ssh masters keep their sockets (runner.control_dir): in the run directory
when the longest path ssh binds there fits in a Unix socket's 107 bytes, else in a short
private directory of the run's own that every process names alike and the play removes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import pytest
from ansible.plugins.connection.ssh import Connection

from gpuboot import paths, runner
from gpuboot.errors import RunError
from gpuboot.executor import jobs
from gpuboot.executor.supervisor import job_kwargs

CP = "ANSIBLE_SSH_CONTROL_PATH_DIR"
DEEP = "x" * 60  # an operator's long home, or pytest's tmp dirs


@pytest.fixture
def base(monkeypatch) -> Path:
    """A short directory standing in for /tmp: the tests leave nothing in the real one."""
    where = Path(tempfile.mkdtemp(prefix="gb-", dir="/tmp"))
    try:
        monkeypatch.setattr(runner, "SHORT_CONTROL_BASE", where, raising=False)
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _deep(tmp_path: Path, name: str = "20250101T000000-install-0a1b2c") -> Path:
    return paths.private_dir(tmp_path / DEEP / name)


def _ssh_binds(cp: Path) -> None:
    """Bind a socket where ssh binds a host's master first: Ansible's ControlPath for the
    host in ``cp``, and ssh's temporary suffix (".", 16 characters)."""
    cp.mkdir(mode=0o700, exist_ok=True)
    path = Connection._create_control_path("node1", 22, "root") % {"directory": cp}
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(path + "." + "a" * 16)
    os.unlink(path + "." + "a" * 16)


def test_a_short_run_directory_keeps_its_sockets_in_its_cp():
    run_dir = Path("/tmp/r/20250101T000000-install-0a1b2c")
    assert runner.ansible_env(run_dir)[CP] == str(run_dir / "cp")


def test_a_deep_run_directorys_sockets_fit_where_ssh_binds_them(tmp_path, base):
    run_dir = _deep(tmp_path)
    cp = Path(runner.ansible_env(run_dir)[CP])
    _ssh_binds(cp)  # not "AF_UNIX path too long"
    assert runner.make_control_dir(run_dir) == cp


def test_the_short_directory_is_private_the_runs_alone_and_the_same_every_time(tmp_path, base):
    one, other = _deep(tmp_path, "run-a"), _deep(tmp_path, "run-b")
    cp = runner.make_control_dir(one)
    assert cp.parent == base and (cp.stat().st_mode & 0o777) == 0o700
    assert runner.make_control_dir(one) == cp == runner.control_dir(one)  # made once, reused
    assert runner.control_dir(other) != cp
    assert runner.control_dir(tmp_path / DEEP / "." / "run-a") == cp  # however it is spelt


def test_by_default_it_is_in_tmp_named_after_the_run(tmp_path):
    cp = Path(runner.ansible_env(_deep(tmp_path))[CP])
    assert cp.parent == Path("/tmp") and cp.name.startswith(f"gpuboot-{os.getuid()}-")
    assert not cp.exists()  # named, not made: the play makes it


def _symlink(cp: Path, elsewhere: Path) -> None:
    cp.symlink_to(elsewhere)


def _anothers(cp: Path, _elsewhere: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a directory to another user takes root")
    cp.mkdir(mode=0o700)
    os.chown(cp, 65534, 65534)


def _open(cp: Path, _elsewhere: Path) -> None:
    cp.mkdir()
    cp.chmod(0o777)


@pytest.mark.parametrize("held", [_symlink, _anothers, _open], ids=["symlink", "another", "open"])
def test_something_else_at_its_name_is_refused(tmp_path, base, held):
    run_dir = _deep(tmp_path)
    elsewhere = paths.private_dir(tmp_path / "theirs")
    held(runner.control_dir(run_dir), elsewhere)
    with pytest.raises(RunError, match="not a private directory of this user's") as refused:
        runner.make_control_dir(run_dir)
    assert "GPUBOOT_RUNS" in refused.value.hint
    assert list(elsewhere.iterdir()) == []


def test_the_play_sweep_looks_for_the_directory_ansible_is_given(tmp_path, monkeypatch):
    run_dir = _deep(tmp_path)
    looked_for = []
    monkeypatch.setattr(runner, "_play_processes", lambda m: looked_for.append(m) or [])
    runner.end_play_processes(run_dir)
    given = runner.ansible_env(run_dir)[CP]
    assert given != str(run_dir / "cp")  # too deep for its sockets: the sweep must follow
    assert looked_for == [f"{CP}={given}".encode()]


def test_a_directory_nowhere_fits_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "SHORT_CONTROL_BASE", tmp_path / DEEP, raising=False)
    with pytest.raises(RunError, match="too long for a Unix socket path") as broke:
        runner.ansible_env(_deep(tmp_path))
    assert "set GPUBOOT_RUNS to a shorter directory" in broke.value.hint


def test_an_executor_jobs_sockets_go_in_its_short_temp_when_its_directory_is_deep(tmp_path, base):
    job = jobs.Job(tmp_path / DEEP, "j1")
    job.dir.mkdir(parents=True)
    temp = paths.private_dir(base / "gpuboot-job-0a1b2c3d")
    line = json.dumps({"kwargs": {"playbook": "install.yml"}}).encode()
    env = json.loads(job_kwargs(line, job, paths.PLAYBOOKS_DIR, temp))["kwargs"]["envvars"]
    assert env[CP] == str(temp / "cp")  # jobs.clear removes it at every end of the job
    _ssh_binds(temp / "cp")


@pytest.mark.subprocess
def test_a_play_makes_its_short_directory_and_removes_it(tmp_path, base, monkeypatch):
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / DEEP))
    inventory = tmp_path / "local.yml"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n"
    )
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n")
    seen: set[str] = set()

    def during(_event, _hosts):
        seen.update(p.name for p in base.iterdir())

    result = runner.run(runner.RunSpec(playbook=play, inventory=(inventory,)), on_event=during)
    assert result.hosts["localhost"].status == "ok"
    assert seen, "no directory of the play's own while it ran"
    assert seen == {runner.control_dir(result.run_dir).name}
    assert list(base.iterdir()) == []  # and gone with it
