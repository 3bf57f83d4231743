"""`rdma system show`, RDMA CM's configfs defaults and a PF's SR-IOV listing on real published
values (tests/fixtures/rdma/SOURCES.md); cut or hostile text is unreadable, never a state."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.mlxconfig import parse_mlxconfig_query
from gpuboot.evidence.rdma_cm import parse_rdma_cm
from gpuboot.evidence.rdma_system import parse_rdma_system
from gpuboot.evidence.sriov import parse_sriov

FIXTURES = Path(__file__).parents[2] / "fixtures" / "rdma"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_rdma_system_reads_the_netns_mode_and_the_other_settings():
    s = parse_rdma_system(_read("rdma_system_show.shared-copy-on-fork.txt"))
    assert s.netns == "shared" and s.fields["copy-on-fork"] == "on"


def test_rdma_system_in_exclusive_mode():
    assert parse_rdma_system(_read("rdma_system_show.exclusive-copy-on-fork.txt")).netns == (
        "exclusive"
    )


def test_rdma_system_of_an_older_iproute2_prints_the_mode_alone():
    assert parse_rdma_system("netns exclusive\n").netns == "exclusive"


@pytest.mark.parametrize(
    "text",
    [
        "netns shared copy-on-fork\n",  # cut inside the line: a key without its value
        "netns shared\nnetns exclusive\n",  # two answers
        "netns sharedx copy-on-fork on\n",  # no mode iproute2 prints
        'Unknown object "system"\n',  # an iproute2 without it
        "",
    ],
)
def test_rdma_system_unreadable(text):
    with pytest.raises(ParseError):
        parse_rdma_system(text)


def test_rdma_cm_reads_the_mode_of_the_created_device():
    cm = parse_rdma_cm(_read("configfs_rdma_cm.rhel7-mlx5_0-roce-v2.txt"))
    assert list(cm) == [("mlx5_0", 1)]
    assert (cm[("mlx5_0", 1)].mode, cm[("mlx5_0", 1)].tos) == ("RoCE v2", None)


def test_rdma_cm_with_no_device_created_is_an_empty_answer():
    assert parse_rdma_cm("/sys/kernel/config/rdma_cm\n") == {}


@pytest.mark.parametrize(
    "text",
    [
        "/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode:RoCE v2\n",  # no ls -d
        "/sys/kernel/config/rdma_cm\n/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_ro",
        "/sys/kernel/config/rdma_cm\n/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos:1x\n",
        "/sys/kernel/config/rdma_cm\n/sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode:v3\n",
    ],
)
def test_rdma_cm_unreadable(text):
    with pytest.raises(ParseError):
        parse_rdma_cm(text)


def test_sriov_listing_reads_links_counts_and_physfn():
    s = parse_sriov(_read("sysfs_sriov_enp4s0.hwloc-4-vfs.txt"), "enp4s0")
    assert (s.mtu, s.sriov, s.total_vfs, s.num_vfs) == (1500, True, 8, 0)
    assert {i: vf.address for i, vf in s.vfs.items()} == {
        0: "0000:04:00.1",
        1: "0000:04:00.2",
        2: "0000:04:00.3",
        3: "0000:04:00.4",
    }
    assert s.vfs[1].physfn == "0000:04:00.0" and s.vfs[0].physfn is None
    assert s.rdma_devices == [] and all(not vf.rdma_devices for vf in s.vfs.values())


def test_sriov_listing_of_a_pf_without_sr_iov():
    s = parse_sriov("/sys/class/net/enp4s0/mtu:9000\n", "enp4s0")
    assert (s.sriov, s.num_vfs, s.vfs) == (False, None, {})


@pytest.mark.parametrize(
    "text",
    [
        "",
        "/sys/class/net/enp4s0/device/sriov_numvfs:8\n",  # no MTU: not this PF's listing
        "/sys/class/net/enp4s0/mtu:9000\n/sys/class/net/other/device/sriov_numvfs:8\n",
        "/sys/class/net/enp4s0/mtu:9000\n/sys/class/net/enp4s0/device/sriov_numvfs:eight\n",
        "/sys/class/net/enp4s0/mtu:9000\nlrwxrwxrwx 1 root root 0 Nov 27 /sys/class/net/enp4s0/de",
        "/sys/class/net/enp4s0/mtu:9000\n/sys/class/net/enp4s0/device/virtfn0/../../../etc\n",
        "/sys/class/net/enp4s0/mtu:9000\n\x1b[2J@@ garbled\n",
    ],
)
def test_sriov_listing_unreadable(text):
    with pytest.raises(ParseError):
        parse_sriov(text, "enp4s0")


def test_mlxconfig_query_next_boot_values():
    fw = parse_mlxconfig_query(_read("mlxconfig_query.cx3-xcpng-sriov-en-8-vfs-excerpt.txt"))
    assert fw.columns == ("Next Boot",)
    assert (fw.number("SRIOV_EN"), fw.number("NUM_OF_VFS")) == (1, 8)


def test_mlxconfig_query_with_default_and_current_columns():
    fw = parse_mlxconfig_query(_read("mlxconfig_query.cx6lx-3-columns-excerpt.txt"))
    assert fw.columns == ("Default", "Current", "Next Boot")
    assert fw.number("ROCE_NEXT_PROTOCOL", "Current") == 254
    assert fw.number("SRIOV_EN") is None  # the excerpt shows no SR-IOV row: not read


@pytest.mark.parametrize(
    "text",
    [
        "-E- Failed to open device: 0000:1a:00.0. No such file or directory\n",
        "Configurations:                              Next Boot\n         SRIOV_EN\n",
        "Configurations:                              Current\n         SRIOV_EN  True(1)\n",
    ],
)
def test_mlxconfig_query_unreadable(text):
    with pytest.raises(ParseError):
        parse_mlxconfig_query(text)
