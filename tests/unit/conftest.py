"""Unit-tier fixtures, shared by every unit test."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def listener():
    """A port every host of a bad-input test points at. Input refused before any host is
    touched leaves it without a connection, which is checked again when the test ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    with pytest.raises(BlockingIOError):  # nothing connected
        sock.accept()
    sock.close()


class Touched(Exception):
    """Raised by the guard: something tried to reach a host."""


@pytest.fixture
def guard(tmp_path, monkeypatch) -> list[tuple[str, tuple, dict]]:
    """Every way a verb reaches hosts (ansible-runner, certify's collection, plan's
    hosts) records what it was given and stops there; GPUBOOT_HOME and the run dir root
    are fresh dirs."""
    from gpuboot import engine, install, plan

    calls: list[tuple[str, tuple, dict]] = []

    def stop(what):
        def fake(*args, **kwargs):
            calls.append((what, args, kwargs))
            raise Touched(what)

        return fake

    monkeypatch.setattr(install, "run", stop("ansible-runner"))
    monkeypatch.setattr(engine, "collect_nodes", stop("certify collection"))
    monkeypatch.setattr(plan, "plan_hosts", stop("plan hosts"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    return calls
