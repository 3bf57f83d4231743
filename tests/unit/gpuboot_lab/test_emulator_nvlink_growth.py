"""The emulator's nvlink-crc-growth fault: a link's CRC count grows with time from the fault
or the node's last boot (a reboot restarts it at 0), and `nvidia-smi nvlink -e` shows it."""

from __future__ import annotations

import time

import pytest

from gpuboot.evidence import parse_nvlink_errors
from gpuboot.profiles import load_profile
from tests.unit.gpuboot_lab._emu import emulator_module, make_node

nvlink = emulator_module("nvlink")
state = emulator_module("state")

ADDED = "2026-11-27T08:00:00+0000"
T0 = 1795766400.0  # the same moment, epoch seconds


def _node(boot_time: float) -> object:
    fault = {"id": 1, "kind": "nvlink-crc-growth", "args": ["3", "5", "600"], "added": ADDED}
    pstate = {**state.new_pstate(), "faults": [fault]}  # --survive-reboot: kept in pstate
    vstate = {**state.new_vstate(), "boot_time": boot_time}
    return state.Node(load_profile("hgx-h100-sxm-8gpu"), pstate, vstate)


def test_the_count_grows_per_minute_from_the_fault_and_restarts_at_a_reboot():
    booted_before = _node(T0 - 3600)
    assert nvlink.crc_growth(booted_before, T0 + 120) == {(3, 5): 1200}
    rebooted = _node(T0 + 600)  # the count starts again at the new boot, not at the fault
    assert nvlink.crc_growth(rebooted, T0 + 660) == {(3, 5): 600}
    assert nvlink.crc_growth(booted_before, T0 + 660) == {(3, 5): 6600}  # not rebooted


@pytest.mark.subprocess
def test_nvidia_smi_nvlink_e_shows_the_growing_link_only(tmp_path):
    node = make_node(tmp_path)
    node.run("ctl", "fault", "add", "nvlink-crc-growth", "3", "5", "600000", check=True)
    first = parse_nvlink_errors(node.run("nvidia-smi", "nvlink", "-e", check=True).out)
    time.sleep(0.5)
    later = parse_nvlink_errors(node.run("nvidia-smi", "nvlink", "-e", check=True).out)
    crc = [g.counters[5]["crc_errors"] for g in (first.gpus[3], later.gpus[3])]
    assert crc[1] > crc[0]
    assert later.gpus[3].counters[4] == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    assert later.gpus[2].total("crc_errors") == 0
    bad = node.run("ctl", "fault", "add", "nvlink-crc-growth", "3", "18")
    assert bad.rc != 0 and "LINK 18 out of range" in bad.out + bad.err
