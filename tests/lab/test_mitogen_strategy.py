"""`gpuboot install --strategy mitogen` (gpuboot[fast]) converges a fresh node exactly as
Ansible's own strategy does, stays put on a re-run, and leaves no controller process."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuboot_lab import lab as labmod

from .conftest import gpuboot, ssh_ok

pytestmark = pytest.mark.lab


def _mitogen_processes() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "mitogen"], capture_output=True, text=True).stdout
    return {int(pid) for pid in out.split()}


def test_mitogen_converges_a_node_and_a_rerun_changes_nothing(make_lab):
    before = _mitogen_processes()
    lab = make_lab(nodes=1, stack="lts-550-cuda12.4")
    try:
        args = ("install", "-i", str(lab.inventory), "--json", "--strategy", "mitogen")
        first = gpuboot(*args)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        node = json.loads(first.stdout)["hosts"]["node1"]
        assert node["status"] == "changed" and node["failed"] == 0, node
        held = ssh_ok(lab, "apt-mark showhold").split()
        assert {"nvidia-driver-550-open", "cuda-toolkit-12-4"} <= set(held), held
        again = gpuboot(*args, "--full")  # every role again, not the converged fast path
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout)["hosts"]["node1"]["changed"] == 0
    finally:
        labmod.down(lab.name)
    assert _mitogen_processes() <= before  # no mitogen multiplexer left behind
