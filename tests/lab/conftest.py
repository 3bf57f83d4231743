"""Helpers for the lab integration tests (the lab fixtures are in tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

from gpuboot_lab import lab as labmod


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


def ssh_ok(lab: labmod.Lab, command: str, node: str = "node1") -> str:
    """stdout of a command that must succeed on a lab node."""
    proc = ssh(lab, node, command)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def reboot_markers(lab: labmod.Lab, node: str = "node1") -> list[str]:
    """The reboot requests gpuboot's roles recorded on a node."""
    return ssh_ok(lab, "ls /run/reboot-required.gpuboot-* 2>/dev/null || true", node).split()
