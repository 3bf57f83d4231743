"""The RDMA-for-pods variables are refused before any host is touched (exit 2), naming the
file, host and key, the rule broken and the fix."""

from __future__ import annotations

import pytest

from gpuboot.errors import EXIT_BAD_INPUT, ConfigError
from gpuboot.inventory.hosts import check_hosts
from gpuboot.inventory.rdma import check_rdma_vars

BASE = {
    "gpuboot_profile": "hgx-h100-sxm-8gpu",
    "nvidia_driver_branch": "550",
    "nvidia_driver_version": "550.54.15-1",
}


def _check(**hostvars):
    return check_hosts("inv.yml", {"node1": {**BASE, **hostvars}})


def test_valid_pod_rdma_settings_load():
    assert _check(gpuboot_rdma_cni="sriov", gpuboot_rdma_vfs=8)["node1"]
    assert _check(gpuboot_rdma_cni="shared", gpuboot_rdma_cm_dscp=24, gpuboot_rdma_mtu=4200)
    assert _check()  # none, the default: nothing else asked for


@pytest.mark.parametrize(
    ("hostvars", "key", "rule", "fix"),
    [
        ({"gpuboot_rdma_cni": "macvlan"}, "gpuboot_rdma_cni", "one of none, sriov, shared",
         "gpuboot_rdma_cni: sriov"),
        ({"gpuboot_rdma_cni": "sriov"}, "gpuboot_rdma_vfs", "from 1 to 256",
         "gpuboot_rdma_vfs: 8"),
        ({"gpuboot_rdma_cni": "sriov", "gpuboot_rdma_vfs": 0}, "gpuboot_rdma_vfs",
         "from 1 to 256", "gpuboot_rdma_vfs: 8"),
        ({"gpuboot_rdma_cni": "sriov", "gpuboot_rdma_vfs": "8"}, "gpuboot_rdma_vfs",
         "whole number", "gpuboot_rdma_vfs: 8"),
        ({"gpuboot_rdma_cni": "shared", "gpuboot_rdma_cm_dscp": 46}, "gpuboot_rdma_cm_dscp",
         "46 >> 3 = 5) is not one of gpuboot_roce_pfc_priorities [3]",
         "gpuboot_rdma_cm_dscp: 26 (priority 3)"),
        ({"gpuboot_rdma_cni": "shared", "gpuboot_rdma_cm_dscp": 64}, "gpuboot_rdma_cm_dscp",
         "from 0 to 63", "gpuboot_rdma_cm_dscp: 26"),
        ({"gpuboot_rdma_cni": "shared", "gpuboot_rdma_mtu": 65536}, "gpuboot_rdma_mtu",
         "from 1280 to 9978", "gpuboot_rdma_mtu: 9000"),
        ({"gpuboot_configfs": "/sys/kernel/config; reboot"}, "gpuboot_configfs",
         "absolute path", "gpuboot_configfs: /sys/kernel/config"),
    ],
)  # fmt: skip
def test_bad_pod_rdma_settings_are_refused_naming_key_rule_and_fix(hostvars, key, rule, fix):
    with pytest.raises(ConfigError) as err:
        _check(**hostvars)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert err.value.where == f"inv.yml: node1.{key}"
    assert rule in err.value.message and fix in err.value.hint


def test_a_dscp_in_another_lossless_priority_is_accepted():
    assert _check(gpuboot_rdma_cni="shared", gpuboot_rdma_cm_dscp=46,
                  gpuboot_roce_pfc_priorities=[3, 5])  # fmt: skip


def test_pod_rdma_on_a_profile_without_roce_rails_is_refused():
    ib_only = {"hardware": {"nics": [{"netdev": "ibp12s0", "link_layer": "InfiniBand"}]}}
    with pytest.raises(ConfigError, match="no RoCE") as err:
        check_rdma_vars("inv.yml", "node1", {"gpuboot_rdma_cni": "shared"}, ib_only)
    assert err.value.where == "inv.yml: node1.gpuboot_rdma_cni"


def test_a_profile_max_vfs_bounds_the_vf_count():
    nics = [{"netdev": "enp1s0np0", "link_layer": "Ethernet", "max_vfs": 16}]
    hostvars = {"gpuboot_rdma_cni": "sriov", "gpuboot_rdma_vfs": 17}
    with pytest.raises(ConfigError, match="from 1 to 16"):
        check_rdma_vars("inv.yml", "node1", hostvars, {"hardware": {"nics": nics}})
