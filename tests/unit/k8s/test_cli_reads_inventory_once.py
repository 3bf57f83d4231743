"""`gpuboot certify --kubeconfig` reads the inventory once: the host locks, the run and the
join gate's node names all come from that one read (each read is ~0.3 s of Ansible's
parser at fleet size, and a file edited mid-run must not give the gate other names)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gpuboot import cli, inventory, remote, transport

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


class Local:
    """A node whose shell is this machine's (the real collection script, run locally)."""

    def run(self, command: str):
        import subprocess

        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
        return SimpleNamespace(rc=out.returncode, stdout=out.stdout, stderr=out.stderr)


def test_certify_with_the_gate_reads_the_inventory_once(tmp_path, monkeypatch, kubeconfig, capsys):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(remote, "KILL_GRACE_S", 0.2)
    (tmp_path / "proc").mkdir()
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_probes: none, "
        "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1, "
        f"gpuboot_procfs: {tmp_path / 'proc'}}}\n"
        "  hosts:\n    n1: {ansible_host: 192.0.2.1, gpuboot_k8s_node_name: gpu-a01}\n"
    )
    real, reads = inventory.load_inventory, []

    def counted(*a, **k):
        reads.append(a)
        return real(*a, **k)

    monkeypatch.setattr(inventory, "load_inventory", counted)
    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Local())
    code = cli.main(["certify", "-i", str(inv), "--kubeconfig", kubeconfig, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1, code  # the node fails (no GPU here) ...
    assert [a["node"] for a in report["k8s_gate"]] == ["gpu-a01"]  # ... and is gated by name
    assert len(reads) == 1
