"""One ssh master per executor for a verb: every command to an executor inside
shared_connections names the same private socket, the operator's own ControlPath wins,
nothing is made for a verb that reaches no executor, and the verb's directory is gone
when it ends."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from gpuboot.executor import mux, route
from gpuboot.inventory import load_inventory

from .test_route import INVENTORY


@pytest.fixture
def home(monkeypatch):
    """A GPUBOOT_HOME as short as the default (pytest's tmp_path is too long a socket path)."""
    with tempfile.TemporaryDirectory(prefix="mux") as short:
        monkeypatch.setenv("GPUBOOT_HOME", f"{short}/home")
        yield Path(short) / "home"


@pytest.fixture
def inv(tmp_path, home):
    path = tmp_path / "inv.yml"
    path.write_text(INVENTORY.replace("-o UserKnownHostsFile", "-o ControlPath=/mine/%C -o X"))
    return load_inventory(path)


def _value(argv: tuple[str, ...], option: str) -> list[str]:
    return [a.split("=", 1)[1] for a in argv if a.startswith(f"{option}=")]


def test_each_executor_keeps_one_private_socket_for_the_whole_verb(inv, home):
    with mux.shared_connections():
        first = route.executor(inv, "ex-b").command("versions")
        again = route.executor(inv, "ex-b").command("run", "--job-id", "j1")
        other = route.executor(inv, "ex-a2").command("versions")
        (sock,) = _value(first, "ControlPath")
        assert _value(again, "ControlPath") == [sock]
        assert _value(other, "ControlPath") != [sock]
        assert _value(first, "ControlMaster") == ["auto"]
        assert _value(first, "ControlPersist") == [str(mux.PERSIST_S)]
        verb_dir = Path(sock).parent
        assert verb_dir.parent == home / "ssh"
        assert stat.S_IMODE(verb_dir.stat().st_mode) == 0o700
        # ssh's options end before the destination: the socket never reaches the remote shell
        assert first.index(f"ControlPath={sock}") < first.index("--")
    assert not verb_dir.exists()
    assert "ControlPath" not in " ".join(route.executor(inv, "ex-b").command("versions"))


def test_the_operators_own_control_path_comes_first_and_so_wins(inv):
    with mux.shared_connections():
        argv = route.executor(inv, "ex-a").command("versions")
    paths = _value(argv, "ControlPath")
    assert paths[0] == "/mine/%C" and len(paths) == 2


def test_a_verb_that_reaches_no_executor_makes_nothing(inv, home):
    with mux.shared_connections(), mux.shared_connections():  # nested: one verb
        pass
    assert not (home / "ssh").exists()


@pytest.mark.parametrize("name", ["h" * 60, "with space", "per%cent"])
def test_a_socket_path_ssh_could_not_bind_gets_no_master(inv, home, monkeypatch, name):
    monkeypatch.setenv("GPUBOOT_HOME", str(home / name))
    with mux.shared_connections():
        argv = route.executor(inv, "ex-b").command("versions")
    assert "ControlMaster=auto" not in argv and "BatchMode=yes" in argv


def test_no_private_directory_means_a_connection_per_command(inv, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GPUBOOT_HOME", str(blocker))  # a file: no directory under it
    with mux.shared_connections():
        argv = route.executor(inv, "ex-b").command("versions")
    assert "ControlMaster=auto" not in argv


def test_a_later_verb_removes_what_a_killed_verb_left_and_nothing_in_use(inv, home):
    """A verb killed outright leaves its directory; the next verb to reach an executor
    removes it once its masters have ended, and never a live verb's or a persisting
    master's."""
    never = int(Path("/proc/sys/kernel/pid_max").read_text())  # no process has this pid
    ssh = home / "ssh"
    left = ssh / f"{never}-abc"
    persisting = ssh / f"{never}-def"
    live = ssh / f"{os.getpid()}-ghi"
    foreign = ssh / "not-a-verb"
    for d in (left, persisting, live, foreign):
        d.mkdir(parents=True)
    (left / "stale").write_text("")
    with socket.socket(socket.AF_UNIX) as master:
        master.bind(str(persisting / "0123456789ab"))
        with mux.shared_connections():
            (sock,) = _value(route.executor(inv, "ex-b").command("versions"), "ControlPath")
            assert Path(sock).parent.name.startswith(f"{os.getpid()}-")
        assert not left.exists()
        assert persisting.exists() and live.exists() and foreign.exists()
