"""Shared fixtures: a real lab (podman nodes reached over real SSH) for integration and
molecule tests. Each lab gets a unique name and is removed, by the ids it recorded,
when its test module ends (lab2: the session), also when a test fails."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import pytest

from gpuboot_lab import lab as labmod

pytest_plugins = ["tests.tiers"]

# Kept run directories of tests go to a throw-away place, not the operator's home.
_RUNS = None if "GPUBOOT_RUNS" in os.environ else tempfile.mkdtemp(prefix="gpuboot-test-runs-")
if _RUNS:
    os.environ["GPUBOOT_RUNS"] = _RUNS


def pytest_sessionfinish(session, exitstatus):
    if _RUNS:
        shutil.rmtree(_RUNS, ignore_errors=True)


@pytest.fixture(autouse=True)
def _unit_state_of_its_own(request, tmp_path_factory, monkeypatch):
    """A unit test keeps its state to itself, so two workers (make test-gate runs two) never
    meet: a GPUBOOT_HOME of its own (host locks, executor jobs, scan history and breakers
    live there, by default in the operator's home), and its worker's own probe lock. The
    emulated nodes run on this host, so their collection scripts share its /run: a probe
    run on one worker would make the other's look busy. A pytest-xdist worker also has
    COLUMNS=80 set: the text tables would be cut as on a terminal, unlike a serial run
    into a pipe. Lab, molecule and browser tests keep the real home: the lab image and
    repository are built there once."""
    if any(request.node.get_closest_marker(m) for m in ("lab", "molecule", "browser")):
        return
    from gpuboot import probes

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path_factory.mktemp("gpuboot-home")))
    monkeypatch.setattr(probes, "LOCK", str(tmp_path_factory.getbasetemp() / "probes.lock"))


def _require_podman() -> None:
    if os.environ.get("CI") and not shutil.which("podman"):
        pytest.fail("podman is missing on CI: `make setup` should have installed it")
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (run `make setup`)")


def _lab_name() -> str:
    return f"t{os.getpid() % 10000}-{uuid.uuid4().hex[:6]}"


def _lab_factory(created: list[str]):
    def make(
        nodes: int = 2,
        profile: str = "hgx-h100-sxm-8gpu",
        stack: str | None = None,
        os: str = "debian",  # as `gpuboot lab up --os`: el9, or debian,el9 (nodes in turn)
    ) -> labmod.Lab:
        name = _lab_name()
        created.append(name)
        return labmod.up(name, nodes, profile, stack=stack, os_spec=os)

    return make


def _remove(created: list[str]) -> None:
    for name in created:
        if name in labmod.names():
            labmod.down(name)


@pytest.fixture(scope="module")
def make_lab():
    """Labs for one test module, removed when its tests are done. Not kept for the whole
    session: every node's systemd takes inotify instances (128 per user by default), and
    a run holding every module's labs at once starves the next node's sshd."""
    _require_podman()
    created: list[str] = []
    try:
        yield _lab_factory(created)
    finally:
        _remove(created)


@pytest.fixture(scope="session")
def lab2() -> labmod.Lab:
    """Two emulated HGX H100 nodes, shared by the flow tests (they run in file order)."""
    _require_podman()
    created: list[str] = []
    try:
        yield _lab_factory(created)(nodes=2)
    finally:
        _remove(created)
