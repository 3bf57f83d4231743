"""The lab's back door (gpuemu ctl) and the state files it keeps."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.unit.gpuboot_lab._emu import GPUEMU, EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


@pytest.fixture
def node(tmp_path) -> EmuNode:
    return make_node(tmp_path)


def test_setup_links_kernel_tools_inside_the_root_and_installs_boot_unit(node):
    for tool in ("lsmod", "modprobe", "rmmod", "modinfo", "dmesg"):
        link = node.root / "usr/local/sbin" / tool
        assert link.is_symlink() and os.path.realpath(link) == str(GPUEMU)
    unit = node.read("/etc/systemd/system/gpuemu-boot.service")
    assert "ExecStart=/opt/gpuemu/gpuemu ctl boot" in unit and "Type=oneshot" in unit
    assert (node.root / "etc/systemd/system/sysinit.target.wants/gpuemu-boot.service").is_symlink()


def test_tools_dispatch_on_their_name(node, tmp_path):
    link = tmp_path / "lsmod"
    link.symlink_to(GPUEMU)
    import subprocess

    out = subprocess.run([str(link)], env=node.env, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("Module                  Size  Used by\n")


def test_status_reports_profile_modules_and_gpus(node):
    st = node.status()
    assert st["profile"] == "hgx-h100-sxm-8gpu" and st["booted"] is True
    assert st["modules"]["nvidia"] == "550.54.15"
    assert [g["bus_id"] for g in st["gpus"]][:2] == ["00000000:19:00.0", "00000000:3B:00.0"]
    assert st["faults"] == []


def test_identity_is_stable_across_setup_and_boot(node):
    before = [g["uuid"] for g in node.status()["gpus"]]
    node.run("ctl", "setup", check=True)
    node.run("ctl", "boot", "--force", check=True)
    assert [g["uuid"] for g in node.status()["gpus"]] == before
    assert len(set(before)) == 8


def test_reboot_drops_volatile_state_and_faults(node):
    node.run("nvidia-smi", "-pm", "1", check=True)
    node.run("ctl", "fault", "add", "thermal-throttle", "1", check=True)
    node.run("ctl", "fault", "add", "nvlink-down", "2", "5", "--survive-reboot", check=True)
    node.run("ctl", "boot", "--force", check=True)
    st = node.status()
    assert [f["kind"] for f in st["faults"]] == ["nvlink-down"]
    assert not any(g["persistence"] for g in st["gpus"])
    assert st["boot_count"] == 2
    assert st["modules"]["nvidia"] == "550.54.15"  # autoloaded again


def test_boot_is_idempotent_without_force(node):
    node.run("nvidia-smi", "-pm", "1", check=True)
    node.run("ctl", "boot", check=True)
    assert all(g["persistence"] for g in node.status()["gpus"])


def test_fault_clear_by_kind_and_all(node):
    node.run("ctl", "fault", "add", "gpu-missing", "1", check=True)
    node.run("ctl", "fault", "add", "thermal-throttle", check=True)
    res = node.run("ctl", "fault", "clear", "gpu-missing", check=True)
    assert json.loads(res.out) == {"cleared": 1}
    assert [f["kind"] for f in node.status()["faults"]] == ["thermal-throttle"]
    node.run("ctl", "fault", "clear", check=True)
    assert node.status()["faults"] == []


@pytest.mark.parametrize(
    "args, msg",
    [
        (["bogus"], "unknown fault kind 'bogus'"),
        (["xid"], "usage: gpuemu ctl fault add xid CODE [GPU]"),
        (["xid", "79", "8"], "GPU 8 out of range"),
        (["nvlink-down", "0", "18"], "LINK 18 out of range"),
        (["pcie-downtrain", "0", "6", "16"], "GEN must be 1-5"),
        (["nic-down", "mlx5_9"], "no NIC 'mlx5_9'"),
        (["low-bandwidth", "nccl", "0.5"], "usage: gpuemu ctl fault add low-bandwidth"),
        (["low-bandwidth", "nvbandwidth", "2"], "FACTOR must be in (0, 1]"),
        (["low-bandwidth", "nvbandwidth", "0.5", "mlx5_1"], "usage: gpuemu ctl fault add"),
        (["low-bandwidth", "ib_write_bw", "0.5", "mlx5_9"], "no NIC 'mlx5_9'"),
    ],
)
def test_bad_fault_arguments(node, args, msg):
    res = node.run("ctl", "fault", "add", *args)
    assert res.rc == 2 and msg in res.err


def test_nvlink_fault_rejected_without_nvlink(tmp_path):
    node = make_node(tmp_path, "l40s-pcie-4gpu")
    res = node.run("ctl", "fault", "add", "nvlink-down", "0")
    assert res.rc == 2 and "no NVLink" in res.err


def test_state_files_are_json_and_survive_concurrent_writers(node):
    def toggle(i: int) -> int:
        return node.run("nvidia-smi", "-pm", str(i % 2), "-i", str(i % 8)).rc

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(toggle, range(32))) == {0}
    with ThreadPoolExecutor(4) as pool:
        kinds = ["thermal-throttle", "remap-pending", "gpu-missing", "ecc-uncorrectable"]
        list(pool.map(lambda k: node.run("ctl", "fault", "add", k, "1", check=True), kinds))
    assert sorted(f["kind"] for f in node.status()["faults"]) == sorted(kinds)
    json.loads(node.read("/var/lib/gpuemu/state.json"))
    json.loads(node.read("/run/gpuemu/state.json"))
    leftovers = [p for p in (node.root / "run/gpuemu").iterdir() if p.name.startswith(".tmp.")]
    assert leftovers == []


def test_setup_without_profile_fails_cleanly(tmp_path):
    node = EmuNode(tmp_path / "n", "hgx-h100-sxm-8gpu")
    (node.root / "etc/gpuemu/profile.json").unlink()
    res = node.run("ctl", "setup")
    assert res.rc == 2 and "no profile at /etc/gpuemu/profile.json" in res.err
