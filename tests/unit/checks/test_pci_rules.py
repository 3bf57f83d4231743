"""PCI-002: the PCI bus's own count of GPUs, NVSwitches and ConnectX functions against what
nvidia-smi and ibstat see and what the profile expects, on the emulated node's evidence
(collected by gpuboot's own script) and on real lspci captures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import LSPCI_GPU_FILE, LSPCI_NIC_FILE
from gpuboot.checks import rules
from gpuboot.collect import state_probes
from gpuboot.profiles import load_profile
from tests.unit.checks._emunode import collect, ctx, full_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captures"


@pytest.fixture
def node(tmp_path):
    return full_node(tmp_path)


def _pci(node, tmp_path, *faults, edit=None):
    for f in faults:
        node.run("ctl", "fault", "add", *f.split(), check=True)
    ev = collect(node, tmp_path, "none")
    if edit:
        edit(ev)
    (finding,) = rules.evaluate(ev, ctx(node, "none"), only=["PCI-002"])
    return finding


def test_the_bus_is_collected_in_the_same_round_trip():
    probes = {p.file: p.command for p in state_probes(load_profile("hgx-h100-sxm-8gpu"))}
    assert probes[LSPCI_GPU_FILE] == "lspci -n -d 10de:"
    assert probes[LSPCI_NIC_FILE] == "lspci -n -d 15b3:"


def test_healthy_node_passes(node, tmp_path):
    f = _pci(node, tmp_path)
    assert f.status == "PASS", f


def test_gpu_on_the_bus_invisible_to_the_driver_is_named(node, tmp_path):
    f = _pci(node, tmp_path, "gpu-unbound 3")
    assert f.status == "FAIL", f
    assert f.reason == (
        "GPU 0000:5d:00.0 (10de:2330) on the PCI bus, invisible to the driver (not in nvidia-smi)"
    )
    assert f.action == rules.RULES_BY_ID["PCI-002"].action


def test_gpu_absent_from_bus_and_driver_is_named_by_the_profile(node, tmp_path):
    f = _pci(node, tmp_path, "gpu-missing 2")
    assert f.status == "FAIL", f
    assert "7 of 8 GPUs on the PCI bus: GPU 0000:4c:00.0 absent from the bus and the driver" in (
        f.reason
    )


def test_nic_on_the_bus_without_an_rdma_device_is_named(node, tmp_path):
    def drop_mlx5_3(ev):
        text = ev["ibstat.txt"].stdout
        blocks = re.split(r"(?m)^(?=CA ')", text)
        kept = "".join(b for b in blocks if not b.startswith("CA 'mlx5_3'"))
        ev["ibstat.txt"] = ProbeOutput(kept, "", 0)

    f = _pci(node, tmp_path, edit=drop_mlx5_3)
    assert f.status == "FAIL", f
    assert f.reason == (
        "8 MT4129 function(s) on the PCI bus, ibstat sees 7: 1 invisible to the driver "
        "(mlx5_3 (0000:5e:00.0))"
    )


def test_missing_nvswitch_is_named(node, tmp_path):
    def drop_switch(ev):
        out = ev[LSPCI_GPU_FILE]
        lines = [ln for ln in out.stdout.splitlines() if not ln.startswith("05:00.0")]
        ev[LSPCI_GPU_FILE] = ProbeOutput("\n".join(lines) + "\n", "", 0)

    f = _pci(node, tmp_path, edit=drop_switch)
    assert f.status == "FAIL" and "3 of 4 NVSwitches on the PCI bus" in f.reason, f


@pytest.mark.parametrize(
    ("stdout", "rc", "why"),
    [
        ("19:00.0 3D controller: NVIDIA Corporation GH100 (rev a1)\n", 0, "unreadable line"),
        ("", 127, "command not found"),
    ],
)
def test_unreadable_lspci_is_error(node, tmp_path, stdout, rc, why):
    def spoil(ev):
        ev[LSPCI_GPU_FILE] = ProbeOutput(stdout, "", rc)

    f = _pci(node, tmp_path, edit=spoil)
    assert f.status == "ERROR" and why in f.reason, f


def test_no_driver_to_ask_is_error_not_fail(node, tmp_path):
    f = _pci(node, tmp_path, "driver-mismatch 550.40.07")
    assert f.status == "ERROR" and "cannot ask the driver" in f.reason, f


def test_real_capture_against_the_driver(tmp_path):
    """A published 4x H100 SXM5 listing (stackhpc, SOURCES-extra.md) with an nvidia-smi table
    that lists three of its GPUs: the fourth, 0000:4c:00.0, is named."""
    lspci = (CAPTURES / "lspci/h100-sxm5-4gpu-nn-grep-nvidia.txt").read_text()
    profile = load_profile("hgx-h100-sxm-8gpu")
    profile = {
        **profile,
        "hardware": {
            **profile["hardware"],
            "gpu": {**profile["hardware"]["gpu"], "count": 4, "pci_bus_ids": []},
            "nvlink": {**profile["hardware"]["nvlink"], "nvswitch_count": 0},
            "nics": [],
        },
    }
    csv = "index, pci.bus_id\n" + "".join(
        f"{i}, 00000000:{b}:00.0\n" for i, b in enumerate(("06", "0C", "46"))
    )
    ev = {
        "lspci_-nn.txt": ProbeOutput(lspci, "", 0),
        "nvidia-smi_--query-gpu_--format=csv.csv": ProbeOutput(csv, "", 0),
    }
    (f,) = rules.evaluate(ev, rules.NodeContext("h", profile), only=["PCI-002"])
    assert f.status == "FAIL", f
    assert f.reason.startswith("GPU 0000:4c:00.0 (10de:2330) on the PCI bus, invisible")
