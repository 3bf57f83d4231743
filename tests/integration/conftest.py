"""A real lab for the integration tests: podman nodes reached over real SSH.

Each lab gets a unique name and is removed (by the ids it recorded) when the
session ends, also when a test fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from gpuboot.lab import lab as labmod

pytestmark = pytest.mark.lab


def _require_podman() -> None:
    if os.environ.get("CI") and not shutil.which("podman"):
        pytest.fail("podman is missing on CI: `make setup` should have installed it")
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (run `make setup`)")


@pytest.fixture(scope="session")
def make_lab():
    _require_podman()
    created: list[str] = []

    def make(nodes: int = 2, profile: str = "hgx-h100-sxm-8gpu") -> labmod.Lab:
        name = f"t{os.getpid() % 10000}-{uuid.uuid4().hex[:6]}"
        created.append(name)
        return labmod.up(name, nodes, profile)

    yield make
    for name in created:
        if name in labmod.names():
            labmod.down(name)


@pytest.fixture(scope="session")
def lab2(make_lab) -> labmod.Lab:
    """Two emulated HGX H100 nodes, shared by the flow tests (they run in file order)."""
    return make_lab(nodes=2)


def gpuboot(*args: str, check_rc: int | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args], capture_output=True, text=True, timeout=900
    )
    if check_rc is not None:
        assert proc.returncode == check_rc, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def ssh(lab: labmod.Lab, node: str, command: str, known_hosts: str | None = None):
    target = lab.node(node)
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(lab.dir / "ssh" / "id_ed25519"),
            "-o",
            f"UserKnownHostsFile={known_hosts or lab.dir / 'ssh' / 'known_hosts'}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            f"root@{target.ip}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
