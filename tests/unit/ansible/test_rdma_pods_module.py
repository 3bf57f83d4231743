"""The collection's gpuboot.node.rdma_pods module and role rdma_pods' boot script run for real
against the lab emulator's sysfs, configfs, rdma, mlxconfig and udevadm: each part converges
the rails, then finds nothing to do; check mode shows and changes nothing; a firmware change
records the reboot and waits for it; the boot script makes it all again after a reboot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.unit.ansible.modrun import run_module
from tests.unit.gpuboot_lab._emu import GPUEMU, EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

SCRIPT = REPO / "gpuboot/ansible/roles/rdma_pods/files/gpuboot-rdma-vfs"
TOOLS = ("rdma", "mlxconfig", "udevadm")
RAILS = ("enp26s0np0", "enp60s0np0")  # two of the H100 profile's eight: enough, and quick


class Lab:
    """One emulated node and the module's view of it (its tools first on PATH)."""

    def __init__(self, tmp_path: Path):
        self.tmp = tmp_path
        self.emu: EmuNode = make_node(tmp_path)
        self.bindir = tmp_path / "bin"
        self.bindir.mkdir()
        for tool in TOOLS:
            shim = self.bindir / tool
            shim.write_text(f'#!/bin/sh\nexec {sys.executable} {GPUEMU} {tool} "$@"\n')
            shim.chmod(0o755)
        self.sysfs = self.emu.root / "run/gpuemu/sys"
        self.configfs = self.emu.root / "run/gpuemu/config"
        self.marker = tmp_path / "reboot-required.gpuboot-rdma-vfs"

    @property
    def env(self) -> dict[str, str]:
        return {**self.emu.env, "PATH": f"{self.bindir}:/usr/bin:/bin"}

    def run(self, part: str, check: bool = False, **args) -> dict:
        params = {
            "part": part,
            "interfaces": list(RAILS),
            "sysfs": str(self.sysfs),
            "configfs": str(self.configfs),
            "reboot_marker": str(self.marker),
            **args,
        }
        return run_module("rdma_pods", self.tmp, params, check=check, env=self.env, timeout=120)

    def converge(self, vfs: int = 2) -> list[dict]:
        return [
            self.run("firmware", vfs=vfs),
            self.run("vfs", vfs=vfs),
            self.run("mtu", vfs=vfs, mtu=9000),
            self.run("netns", netns="exclusive"),
            self.run("cm", cm_tos=104),
        ]

    def numvfs(self, pf: str) -> str:
        return (self.sysfs / f"class/net/{pf}/device/sriov_numvfs").read_text().strip()

    def vf_nets(self, pf: str) -> list[str]:
        dev = self.sysfs / f"class/net/{pf}/device"
        return sorted(n for d in dev.glob("virtfn*") for n in os.listdir(d / "net"))

    def mtu(self, netdev: str) -> str:
        return (self.sysfs / f"class/net/{netdev}/mtu").read_text().strip()

    def tos(self, dev: str) -> str:
        return (self.configfs / f"rdma_cm/{dev}/ports/1/default_roce_tos").read_text().strip()


@pytest.fixture
def lab(tmp_path) -> Lab:
    return Lab(tmp_path)


def test_the_parts_converge_the_rails_then_change_nothing(lab):
    first = lab.converge()
    assert [r.get("failed") for r in first] == [None] * 5, first
    assert [r["changed"] for r in first] == [False, True, True, True, True]  # firmware offers 8
    assert [lab.numvfs(pf) for pf in RAILS] == ["2", "2"]
    assert lab.vf_nets(RAILS[0]) == ["enp26s0v0", "enp26s0v1"]
    assert {lab.mtu(n) for n in [*RAILS, *lab.vf_nets(RAILS[0])]} == {"9000"}
    assert lab.emu.run("rdma", "system").out == "netns exclusive copy-on-fork on\n"
    assert {lab.tos(d) for d in ("mlx5_0", "mlx5_1", "mlx5_8", "mlx5_9")} == {"104"}
    again = lab.converge()
    assert [r["changed"] for r in again] == [False] * 5, again


def test_check_mode_shows_the_vf_mode_cm_and_mtu_changes_and_makes_none(lab):
    vfs = lab.run("vfs", check=True, vfs=2)
    assert vfs["changed"] is True
    assert vfs["diff"][0] == {
        "before_header": "enp26s0np0",
        "after_header": "enp26s0np0",
        "before": "sriov_numvfs: 0\n",
        "after": "sriov_numvfs: 2\n",
    }
    mtu = lab.run("mtu", check=True, vfs=2, mtu=9000)
    assert mtu["diff"][0]["before"] == "enp26s0np0: 1500\nVFs to be made: 2\n"
    assert mtu["diff"][0]["after"] == "enp26s0np0: 9000\nVFs to be made: 2 at MTU 9000\n"
    netns = lab.run("netns", check=True, netns="exclusive")
    assert netns["diff"] == [{"before": "netns shared\n", "after": "netns exclusive\n"}]
    cm = lab.run("cm", check=True, cm_tos=104)
    assert "mlx5_0 tos: 0\n" in cm["diff"][0]["before"]
    assert "mlx5_0 tos: 104\n" in cm["diff"][0]["after"]
    assert lab.numvfs(RAILS[0]) == "0" and lab.mtu(RAILS[0]) == "1500" and lab.tos("mlx5_0") == "0"
    assert lab.emu.run("rdma", "system").out == "netns shared copy-on-fork on\n"


def test_a_firmware_change_records_the_reboot_and_the_vfs_wait_for_it(lab):
    preview = lab.run("firmware", check=True, vfs=16)
    assert preview["changed"] is True and preview["reboot"] is True
    shown = "".join(d["after"] for d in preview["diff"])
    assert "sriov_totalvfs: 16 after the reboot" in shown
    assert "firmware SR-IOV applies at the next boot: enp26s0np0 (0000:1a:00.0)" in shown
    assert not lab.marker.exists()
    # --check: the VF part after it shows the count the reboot brings, and does not fail
    vfs_preview = lab.run("vfs", check=True, vfs=16)
    assert vfs_preview["changed"] is True and not vfs_preview.get("failed"), vfs_preview
    assert vfs_preview["diff"][0]["after"] == "sriov_numvfs: 16 after the reboot\n"
    q = lab.emu.run("mlxconfig", "-d", "0000:1a:00.0", "q", check=True).out
    assert "NUM_OF_VFS                          8\n" in q
    done = lab.run("firmware", vfs=16)
    assert done["changed"] is True and done["reboot"] is True
    assert "NUM_OF_VFS 8 running, 16 wanted" in lab.marker.read_text()
    q = lab.emu.run("mlxconfig", "-d", "0000:1a:00.0", "q", check=True).out
    assert "NUM_OF_VFS                          16\n" in q
    waits = lab.run("vfs", vfs=16)
    assert waits["changed"] is False and "wait for the pending reboot" in str(waits["warnings"])
    assert lab.run("firmware", vfs=16)["changed"] is False  # recorded once
    lab.emu.run("ctl", "boot", "--force", check=True)
    lab.marker.unlink()  # /var/run: a reboot empties it
    assert lab.run("firmware", vfs=16)["changed"] is False
    assert lab.run("vfs", vfs=16)["changed"] is True
    assert lab.numvfs(RAILS[1]) == "16"


def test_too_few_vfs_without_a_pending_reboot_fail(lab):
    res = lab.run("vfs", vfs=9)
    assert res["failed"] is True
    assert "enp26s0np0: the firmware offers 8 VFs, 9 wanted" in res["msg"]


def test_a_lossy_cm_tos_is_repaired_on_that_device_alone(lab):
    lab.converge()
    lab.emu.run("ctl", "fault", "add", "cm-tos-lossy", "mlx5_8", check=True)
    assert lab.tos("mlx5_8") == "0"
    res = lab.run("cm", cm_tos=104)
    assert res["changed"] is True and len(res["diff"]) == 1
    assert res["rails"]["enp26s0np0"]["mlx5_8"] == {"mode": "RoCE v2", "tos": "0"}
    assert lab.tos("mlx5_8") == "104"


def test_the_boot_script_makes_vfs_mtu_and_cm_defaults_again_after_a_reboot(lab):
    lab.converge()
    lab.emu.run("ctl", "boot", "--force", check=True)
    assert lab.numvfs(RAILS[0]) == "0" and lab.tos("mlx5_0") == "0"
    argv = [str(lab.sysfs), str(lab.configfs), "2", "9000", "104", *RAILS]
    proc = subprocess.run(
        ["sh", str(SCRIPT), *argv], env=lab.env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert [lab.numvfs(pf) for pf in RAILS] == ["2", "2"]
    assert {lab.mtu(n) for n in [*RAILS, *lab.vf_nets(RAILS[1])]} == {"9000"}
    vf_devs = [
        os.listdir(d / "infiniband")[0]
        for d in (lab.sysfs / "class/net/enp60s0np0/device").glob("virtfn*")
    ]
    assert {lab.tos(d) for d in ["mlx5_0", *vf_devs]} == {"104"}
    again = lab.converge()
    # the namespace mode comes from ib_core's option at boot, which the role's file sets
    assert [r["changed"] for r in again] == [False, False, False, True, False], again
