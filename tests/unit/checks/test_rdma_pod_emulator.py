"""gpuboot's real collection against an emulated node prepared for SR-IOV pods (the emulator's
RDMA-for-pods model): RDM-001..006 pass, and each fault the lab can inject fails its rule."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from tests.unit.checks._emunode import collect, ctx, dpkg_line, full_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

VFS = 2


def _prepared(tmp: Path):
    """An 8-rail H100 node as the rdma_pods role leaves it: VFs, MTU 9000, exclusive mode,
    RDMA CM's ToS 104 (DSCP 26) on every device."""
    node = full_node(tmp)
    sysfs = node.root / "run/gpuemu/sys"
    for nic in node.profile["hardware"]["nics"]:
        (sysfs / f"class/net/{nic['netdev']}/device/sriov_numvfs").write_text(f"{VFS}\n")
    node.run("udevadm", "settle", check=True)
    node.run("rdma", "system", "set", "netns", "exclusive", check=True)
    for mtu in glob.glob(str(sysfs / "class/net/*/mtu")):
        Path(mtu).write_text("9000\n")
    for tos in glob.glob(str(node.root / "run/gpuemu/config/rdma_cm/*/ports/1/default_roce_tos")):
        Path(tos).write_text("104\n")
    return node


def _judge(node, tmp: Path, *faults: str) -> dict[str, tuple[str, str]]:
    for fault in faults:
        node.run("ctl", "fault", "add", *fault.split(), check=True)
    extra = {
        "gpuboot_rdma_cni": "sriov",
        "gpuboot_rdma_vfs": VFS,
        "gpuboot_configfs": str(node.root / "run/gpuemu/config"),
    }
    ev = collect(node, tmp, "none", **extra)
    ev["dpkg-query_-W.txt"] = ProbeOutput(dpkg_line(), "", 0)
    found = rules.evaluate(ev, ctx(node, "none", **extra), ["RDM-"])
    return {f.rule: (str(f.status), f.reason) for f in found}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rdma")
    return _prepared(tmp), tmp


def test_a_prepared_node_passes_every_rdm_rule(node):
    found = _judge(*node)
    assert {r: s for r, (s, _w) in found.items() if s != "PASS"} == {}, found
    assert found["RDM-006"][1] == "16 VF(s), each on its GPU's rail NIC"


@pytest.mark.parametrize(
    ("fault", "rule", "says"),
    [
        ("vfs-gone mlx5_0", "RDM-001", "enp26s0np0 (GPU 0): 0 VF(s), want 2"),
        ("rdma-netns-wrong", "RDM-004", "RDMA netns mode shared, want exclusive"),
        ("no-v2-gid mlx5_1", "RDM-003", "enp60s0np0 (mlx5_1): no RoCE v2 GID"),
        ("cm-tos-lossy mlx5_2", "RDM-005", "mlx5_2: RDMA CM ToS 0, want 104 (DSCP 26)"),
    ],
)
def test_each_emulated_fault_fails_its_rule_alone(tmp_path, fault, rule, says):
    found = _judge(_prepared(tmp_path), tmp_path, fault)
    assert {r: s for r, (s, _w) in found.items() if s != "PASS"} == {rule: "FAIL"}, found
    assert says in found[rule][1]
