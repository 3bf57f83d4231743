"""RDMA for pods in the emulator: VFs from sriov_numvfs, their RDMA devices and GIDs, the
namespace mode, RDMA CM's configfs, mlxconfig's reboot-only settings, and their faults."""

from __future__ import annotations

import os

import pytest

from tests.unit.gpuboot_lab._emu import EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

PF, PCI = "enp26s0np0", "0000:1a:00.0"  # rail 0 of the H100 profile
SYS, CONFIG = "/run/gpuemu/sys", "/run/gpuemu/config"


@pytest.fixture
def node(tmp_path) -> EmuNode:
    return make_node(tmp_path)


def _write(node: EmuNode, path: str, text: str) -> None:
    (node.root / path.lstrip("/")).write_text(text)


def _device(node: EmuNode) -> str:
    return f"{SYS}/class/net/{PF}/device"


def _vfs(node: EmuNode, pf: str = PF) -> list[str]:
    d = node.root / f"{SYS}/class/net/{pf}/device".lstrip("/")
    return sorted(n for n in os.listdir(d) if n.startswith("virtfn"))


def _make_vfs(node: EmuNode, count: int, pf: str = PF) -> None:
    _write(node, f"{SYS}/class/net/{pf}/device/sriov_numvfs", f"{count}\n")
    node.run("udevadm", "settle", check=True)


def _vf_ib(node: EmuNode, i: int) -> str:
    return os.listdir(node.root / f"{_device(node)}/virtfn{i}/infiniband".lstrip("/"))[0]


def test_writing_sriov_numvfs_creates_vfs_with_rdma_devices_and_netdevs(node):
    assert node.read(f"{_device(node)}/sriov_totalvfs") == "8\n"
    assert node.read(f"{_device(node)}/sriov_numvfs") == "0\n"
    assert _vfs(node) == []
    _make_vfs(node, 2)
    assert _vfs(node) == ["virtfn0", "virtfn1"]
    vf0 = node.root / f"{_device(node)}/virtfn0".lstrip("/")
    assert os.readlink(vf0) == "../0000:1a:00.1"
    assert os.path.realpath(vf0 / "physfn") == os.path.realpath(
        node.root / _device(node).lstrip("/")
    )
    assert os.listdir(vf0 / "net") == ["enp26s0v0"]
    assert node.read(f"{SYS}/class/net/enp26s0v0/mtu") == "1500\n"
    ib = _vf_ib(node, 0)
    assert ib == "mlx5_8"  # numbered after the 8 PFs, as the driver probes them
    assert (
        f"link {ib}/1 state ACTIVE physical_state LINK_UP netdev enp26s0v0 "
        in node.run("rdma", "link").out
    )


def test_vf_rdma_devices_have_roce_v2_gids_in_sysfs_and_show_gids(node):
    _make_vfs(node, 1)
    ib = _vf_ib(node, 0)
    port = f"{SYS}/class/infiniband/{ib}/ports/1"
    assert node.read(f"{port}/gid_attrs/types/1") == "RoCE v2\n"
    assert node.read(f"{port}/gid_attrs/types/0") == "IB/RoCE v1\n"
    assert node.read(f"{port}/gid_attrs/ndevs/1") == "enp26s0v0\n"
    assert node.read(f"{port}/gids/1").startswith("fe80:0000:0000:0000:")
    rows = [r.split("\t") for r in node.run("show_gids", check=True).out.splitlines()]
    assert [r[-2] for r in rows if r[0] == ib] == ["v1", "v2"]


def test_vfs_vanish_at_reboot_until_written_again(node):
    _make_vfs(node, 2)
    _write(node, f"{SYS}/class/net/enp26s0v0/mtu", "9000\n")
    node.run("ctl", "boot", "--force", check=True)
    assert _vfs(node) == []
    assert node.read(f"{_device(node)}/sriov_numvfs") == "0\n"
    assert not node.exists(f"{SYS}/class/net/enp26s0v0")
    _make_vfs(node, 2)  # what the boot unit does
    assert _vfs(node) == ["virtfn0", "virtfn1"]
    assert node.read(f"{SYS}/class/net/enp26s0v0/mtu") == "1500\n"  # a new netdev


def test_more_vfs_than_the_firmware_allows_is_refused(node):
    _make_vfs(node, 9)
    assert _vfs(node) == []
    assert node.read(f"{_device(node)}/sriov_numvfs") == "0\n"
    assert "9 VFs requested; only 8 supported" in node.run("dmesg").out


def test_netns_mode_set_at_runtime_and_taken_from_the_ib_core_option_at_boot(node):
    assert node.run("rdma", "system", check=True).out == "netns shared copy-on-fork on\n"
    node.run("rdma", "system", "set", "netns", "exclusive", check=True)
    assert node.run("rdma", "system", "show", check=True).out == "netns exclusive copy-on-fork on\n"
    node.run("ctl", "boot", "--force", check=True)
    assert node.run("rdma", "system").out == "netns shared copy-on-fork on\n"  # not persisted
    conf = node.root / "etc/modprobe.d/gpuboot-rdma.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("options ib_core netns_mode=0\n")
    node.run("ctl", "boot", "--force", check=True)
    assert node.run("rdma", "system").out == "netns exclusive copy-on-fork on\n"
    assert node.run("rdma", "system", "set", "netns", "private").rc == 1


def test_rdma_cm_mode_and_tos_in_configfs_reset_at_boot(node):
    cm = f"{CONFIG}/rdma_cm/mlx5_0/ports/1"
    assert node.read(f"{cm}/default_roce_mode") == "RoCE v2\n"
    assert node.read(f"{cm}/default_roce_tos") == "0\n"
    _write(node, f"{cm}/default_roce_tos", "104\n")
    assert node.run("cma_roce_tos", "-d", "mlx5_0", check=True).out == "104\n"
    node.run("cma_roce_mode", "-d", "mlx5_0", "-p", "1", "-m", "1", check=True)
    assert node.read(f"{cm}/default_roce_mode") == "IB/RoCE v1\n"
    _make_vfs(node, 1)
    assert node.read(f"{CONFIG}/rdma_cm/{_vf_ib(node, 0)}/ports/1/default_roce_tos") == "0\n"
    node.run("ctl", "boot", "--force", check=True)
    assert node.read(f"{cm}/default_roce_tos") == "0\n"
    assert node.read(f"{cm}/default_roce_mode") == "RoCE v2\n"


def test_mlxconfig_set_takes_effect_at_the_next_boot_only(node):
    q = ["-d", PCI, "q", "SRIOV_EN", "NUM_OF_VFS"]
    assert "NUM_OF_VFS                          8\n" in node.run("mlxconfig", *q, check=True).out
    refused = node.run("mlxconfig", "-d", PCI, "set", "NUM_OF_VFS=16")
    assert refused.rc == 1 and "Aborted by user" in refused.err
    done = node.run("mlxconfig", "-y", "-d", PCI, "set", "SRIOV_EN=1", "NUM_OF_VFS=16", check=True)
    assert "Please reboot machine to load new configurations." in done.out
    assert "NUM_OF_VFS                          16\n" in node.run("mlxconfig", *q).out  # next boot
    assert node.read(f"{_device(node)}/sriov_totalvfs") == "8\n"  # still the running firmware
    node.run("ctl", "boot", "--force", check=True)
    assert node.read(f"{_device(node)}/sriov_totalvfs") == "16\n"
    node.run("mlxconfig", "-y", "-d", PCI, "set", "SRIOV_EN=0", check=True)
    node.run("ctl", "boot", "--force", check=True)
    assert node.read(f"{_device(node)}/sriov_totalvfs") == "0\n"
    assert "True(1)" not in node.run("mlxconfig", *q).out


def test_fault_vfs_gone_and_clear(node):
    _make_vfs(node, 2)
    node.run("ctl", "fault", "add", "vfs-gone", PF, check=True)
    assert _vfs(node) == []
    assert node.read(f"{_device(node)}/sriov_numvfs") == "0\n"
    node.run("ctl", "fault", "clear", "vfs-gone", check=True)
    assert _vfs(node) == ["virtfn0", "virtfn1"]


def test_fault_rdma_netns_wrong_flips_the_mode(node):
    node.run("ctl", "fault", "add", "rdma-netns-wrong", check=True)
    assert node.run("rdma", "system").out == "netns exclusive copy-on-fork on\n"
    node.run("ctl", "fault", "clear", check=True)
    assert node.run("rdma", "system").out == "netns shared copy-on-fork on\n"


def test_fault_no_v2_gid_takes_the_first_vfs_v2_gid(node):
    _make_vfs(node, 1)
    ib = _vf_ib(node, 0)
    node.run("ctl", "fault", "add", "no-v2-gid", check=True)
    types = f"{SYS}/class/infiniband/{ib}/ports/1/gid_attrs/types"
    assert os.listdir(node.root / types.lstrip("/")) == ["0"]
    assert [r for r in node.run("show_gids").out.splitlines() if r.startswith(f"{ib}\t")] != []
    assert not [
        r
        for r in node.run("show_gids").out.splitlines()
        if r.startswith(f"{ib}\t") and "\tv2\t" in r
    ]
    node.run("ctl", "fault", "clear", "no-v2-gid", check=True)
    assert node.read(f"{types}/1") == "RoCE v2\n"


def test_fault_cm_tos_lossy_and_clear(node):
    cm = f"{CONFIG}/rdma_cm/mlx5_0/ports/1/default_roce_tos"
    _write(node, cm, "104\n")
    node.run("ctl", "fault", "add", "cm-tos-lossy", check=True)
    assert node.read(cm) == "0\n"
    node.run("ctl", "fault", "clear", "cm-tos-lossy", check=True)
    assert node.read(cm) == "104\n"
    bad = node.run("ctl", "fault", "add", "cm-tos-lossy", "mlx5_0", "300")
    assert bad.rc == 2 and "usage: gpuemu ctl fault add cm-tos-lossy" in bad.err
