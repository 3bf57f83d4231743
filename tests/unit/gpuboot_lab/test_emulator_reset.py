"""The emulator's GPU reset as remediation uses it: the compute processes on a GPU are
listed (--query-compute-apps), a reset clears that GPU's Xid state of this boot but not a
persistent fault, and a GPU fallen off the bus (Xid 79) cannot be reset."""

from __future__ import annotations

import json

import pytest

from tests.unit.gpuboot_lab._emu import EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


@pytest.fixture
def node(tmp_path) -> EmuNode:
    return make_node(tmp_path)


def xids(node: EmuNode) -> list[tuple[str, str, bool]]:
    faults = json.loads(node.run("ctl", "fault", "list", check=True).out)
    return sorted((f["args"][0], f["args"][1], f["survive_reboot"]) for f in faults
                  if f["kind"] == "xid")  # fmt: skip


def test_the_compute_processes_of_a_gpu_are_listed_by_its_pci_address(node):
    node.run("ctl", "fault", "add", "gpu-process", "2", "/usr/bin/python", "9212", check=True)
    query = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"]
    out = node.run("nvidia-smi", *query, "-i", "0000:4c:00.0", check=True).out
    (line,) = out.splitlines()
    pid, name, mib = line.split(", ")
    assert pid.isdigit() and name == "/usr/bin/python" and mib == "9212 MiB"
    assert node.run("nvidia-smi", *query, "-i", "3", check=True).out == ""


def test_a_reset_clears_the_gpus_xid_state_of_this_boot_not_a_persistent_one(node):
    node.run("ctl", "fault", "add", "xid", "48", "2", check=True)
    node.run("ctl", "fault", "add", "xid", "95", "3", check=True)
    node.run("ctl", "fault", "add", "xid", "94", "2", "--survive-reboot", check=True)
    node.run("nvidia-smi", "-r", "-i", "2", check=True)
    assert xids(node) == [("94", "2", True), ("95", "3", False)]


def test_a_gpu_fallen_off_the_bus_cannot_be_reset(node):
    node.run("ctl", "fault", "add", "xid", "79", "1", check=True)
    res = node.run("nvidia-smi", "-r", "-i", "1")
    assert res.rc == 15 and "Unable to reset GPU" in res.out
    assert xids(node) == [("79", "1", False)]
