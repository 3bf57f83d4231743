"""Bandwidth probes, fabric manager, DCGM: healthy figures follow the profile, faults drop
them the way real faults do, and CUDA refuses to start where it would on a real node."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from gpuboot.evidence import (
    parse_all_reduce_perf,
    parse_dcgmi_diag_json,
    parse_dcgmi_diag_text,
    parse_nvbandwidth_json,
    parse_nvbandwidth_text,
)
from tests.unit.gpuboot_lab._emu import Daemon, EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


@pytest.fixture
def node(tmp_path) -> EmuNode:
    n = make_node(tmp_path)
    n.install_userspace("fabricmanager", "550.54.15")
    return n


@pytest.fixture
def fm(node):
    with Daemon(node, "nv-fabricmanager", "fabricmanager", "--foreground") as d:
        yield d


def _h2d(node: EmuNode) -> list[float]:
    res = node.run("nvbandwidth", "-t", "host_to_device_memcpy_ce", "-j", check=True)
    return [
        float(x) for x in json.loads(res.out)["nvbandwidth"]["testcases"][0]["bandwidth_matrix"][0]
    ]


def test_hgx_needs_fabric_manager_before_cuda_works(node):
    res = node.run("nvbandwidth")
    assert res.rc == 1
    assert res.err.startswith("[CUDA_ERROR_SYSTEM_NOT_READY] system not yet initialized")
    res = node.run("all_reduce_perf", "-g", "8")
    assert res.rc != 0 and "'system not yet initialized'" in res.out
    q = node.run("nvidia-smi", "-q", "-i", "0", check=True).out
    assert re.search(r"^        State +: In Progress$", q, re.M)


def test_fabric_manager_trains_the_fabric(node, fm):
    q = node.run("nvidia-smi", "-q", "-i", "0", check=True).out
    assert re.search(r"^        State +: Completed\n        Status +: Success$", q, re.M)
    assert node.run("rmmod", "nvidia").rc == 1  # held by the daemon
    assert fm.stop() == 0
    assert node.status()["daemons"]["fabricmanager"] is False


def test_fabric_manager_version_must_match_driver(node):
    node.install_userspace("fabricmanager", "550.90.07")
    res = node.run("nv-fabricmanager")
    assert res.rc == 1
    assert (
        "fabric manager NVIDIA GPU driver interface version 550.90.07 don't match with "
        "driver version 550.54.15"
    ) in res.err


def test_fabricmanager_fails_fault(node):
    node.run("ctl", "fault", "add", "fabricmanager-fails", check=True)
    res = node.run("nv-fabricmanager")
    assert res.rc == 1 and "NVLink training failed" in res.err
    assert node.run("nvbandwidth").rc == 1


def test_fabric_manager_refuses_pcie_only_systems(tmp_path):
    node = make_node(tmp_path, "l40s-pcie-4gpu")
    assert node.run("nv-fabricmanager").rc == 1


def test_nvbandwidth_healthy_matches_profile(node, fm):
    h2d = _h2d(node)
    assert len(h2d) == 8
    assert all(abs(v - 55.0) / 55.0 < 0.02 for v in h2d)
    doc = parse_nvbandwidth_json(node.run("nvbandwidth", "-j", check=True).out)
    d2d = next(t for t in doc.tests if t.name == "device_to_device_memcpy_read_ce")
    assert d2d.passed and d2d.matrix[0][0] is None
    assert all(abs(v - 390) / 390 < 0.02 for row in d2d.matrix for v in row if v is not None)
    text = parse_nvbandwidth_text(node.run("nvbandwidth", "-t", "0", check=True).out)
    assert text.tests[0].name == "host_to_device_memcpy_ce" and len(text.tests) == 1
    assert text.driver_version == "550.54.15"


def test_nvbandwidth_drops_with_pcie_downtrain_and_low_bandwidth(node, fm):
    node.run("ctl", "fault", "add", "pcie-downtrain", "2", "4", "16", check=True)
    h2d = _h2d(node)
    assert h2d[2] == pytest.approx(27.5, rel=0.03)  # Gen4 = half of Gen5
    assert h2d[1] == pytest.approx(55.0, rel=0.02)
    node.run("ctl", "fault", "add", "low-bandwidth", "nvbandwidth", "0.5", check=True)
    assert _h2d(node)[1] == pytest.approx(27.5, rel=0.03)


def test_nvbandwidth_unknown_testcase(node, fm):
    res = node.run("nvbandwidth", "-t", "nope")
    assert res.rc == 1 and "nope" in res.err


def test_all_reduce_layout_and_plateau(node, fm):
    out = node.run("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8", check=True).out
    lines = out.splitlines()
    assert lines[0].startswith("# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)")
    assert sum(1 for x in lines if x.startswith("#  Rank ")) == 8
    rows = [x for x in lines if re.match(r"^\s+\d+\s+\d+\s+float\s+sum\s+-1\s", x)]
    assert len(rows) == 31
    assert re.fullmatch(
        r" {11}8 {13}2 {5}float {5}sum {6}-1 +[\d.]+ +[\d.]+ +[\d.]+ +0 "
        r"+[\d.]+ +[\d.]+ +[\d.]+ +0",
        rows[0],
    )
    busbw = float(rows[-1].split()[7])
    assert busbw == pytest.approx(460, rel=0.05)
    parsed = parse_all_reduce_perf(out)
    assert parsed.layout == "new" and len(parsed.ranks) == 8 and len(parsed.rows) == 31
    assert parsed.rows[-1].out_of_place.busbw_gbytes_s == busbw
    assert re.search(r"^# Avg bus bandwidth    : [\d.]+ $", out, re.M)


def test_all_reduce_drops_with_nvlink_down_and_throttle(node, fm):
    def plateau() -> float:
        out = node.run("all_reduce_perf", "-b", "8G", "-e", "8G", "-g", "8", check=True).out
        row = next(x for x in out.splitlines() if x.strip().startswith("8589934592"))
        return float(row.split()[7])

    healthy = plateau()
    node.run("ctl", "fault", "add", "nvlink-down", "3", check=True)  # all 18 links of GPU 3
    assert plateau() < 0.2 * healthy
    node.run("ctl", "fault", "clear", check=True)
    node.run("ctl", "fault", "add", "nvlink-down", "3", "7", check=True)
    assert plateau() == pytest.approx(healthy * 17 / 18, rel=0.04)


def test_all_reduce_more_gpus_than_present(node, fm):
    node.run("ctl", "fault", "add", "gpu-missing", "7", check=True)
    res = node.run("all_reduce_perf", "-g", "8")
    assert res.rc != 0 and "'invalid device ordinal'" in res.out


def test_dcgmi_needs_host_engine(node):
    res = node.run("dcgmi", "diag", "-r", "1")
    assert res.rc == 255 and "Unable to connect to host engine" in res.out


def test_dcgmi_diag_reports_faults(node, fm):
    with Daemon(node, "nv-hostengine", "hostengine", "-n"):
        node.run("nvidia-smi", "-pm", "1", check=True)
        healthy = parse_dcgmi_diag_text(node.run("dcgmi", "diag", "-r", "3", check=True).out)
        assert healthy.failed == ()
        assert healthy.metadata["Driver Version Detected"] == "550.54.15"
        node.run("ctl", "fault", "add", "remap-pending", "2", check=True)
        node.run("ctl", "fault", "add", "pcie-downtrain", "1", "3", "16", check=True)
        node.run("ctl", "fault", "add", "thermal-throttle", "4", check=True)
        text = node.run("dcgmi", "diag", "-r", "3", check=True).out
        diag = parse_dcgmi_diag_text(text)
        assert {"Page Retirement/Row Remap", "PCIe", "Targeted Power"} <= set(diag.failed)
        assert "| PCIe                      | Fail - GPU: 1" in text
        js = parse_dcgmi_diag_json(node.run("dcgmi", "diag", "-r", "3", "-j", check=True).out)
        pcie = [r for r in js.results if r.test == "PCIe"]
        assert [r.result for r in pcie].count("Fail") == 1 and len(pcie) == 8


def test_dcgmi_persistence_off_fails_deployment(node, fm):
    with Daemon(node, "nv-hostengine", "hostengine", "-n"):
        diag = parse_dcgmi_diag_text(node.run("dcgmi", "diag", "-r", "1", check=True).out)
        assert diag.failed == ("Persistence Mode",)


def test_hostengine_daemonizes_and_terminates(node):
    res = node.run("nv-hostengine", check=True)
    assert res.out.startswith("Started host engine version 3.3.9 using port number: 5555")
    for _ in range(100):
        if node.status()["daemons"]["hostengine"]:
            break
        time.sleep(0.05)
    assert node.run("dcgmi", "discovery", "-l", check=True).out.startswith("8 GPUs found.")
    assert node.run("nv-hostengine", "--term", check=True).out == (
        "Host engine successfully terminated.\n"
    )


def test_fabric_manager_forks_with_the_packaged_config(node):
    cfg = node.root / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("LOG_LEVEL=4\nFABRIC_MODE=0\n")  # no DAEMONIZE: the real default is 1
    res = node.run("nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert res.rc == 0
    pid = int(node.read("/run/nvidia-fabricmanager/nv-fabricmanager.pid"))
    try:
        assert node.status()["daemons"]["fabricmanager"] is True
        assert node.run("nvbandwidth", "-t", "0").rc == 0
    finally:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not node.status()["daemons"]["fabricmanager"]:
                break
            time.sleep(0.05)
    assert node.run("nvbandwidth", "-t", "0").rc == 1
