"""TOP-001: `nvidia-smi topo -m` judged against the profile (rail NIC at PIX/PXB, NVLink mesh
complete, GPU NUMA affinity) on real captures (captures/topo_m, SOURCES.md) and on the
emulated node, where a nic-swap fault puts two NICs in each other's slot."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import TOPO_FILE
from gpuboot.checks import rules
from gpuboot.collect import state_probes
from gpuboot.errors import ConfigError
from gpuboot.profiles import load_profile, validate
from tests.unit.checks._emunode import collect, ctx, full_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

TOPO = Path(__file__).resolve().parents[2] / "fixtures" / "captures" / "topo_m"
H100 = load_profile("hgx-h100-sxm-8gpu")


def _judge(text: str, profile: dict):
    ev = {TOPO_FILE: ProbeOutput(text, "", 0)}
    (f,) = rules.evaluate(ev, rules.NodeContext("n", profile), only=["TOP-001"])
    return f


def _profile(base: dict, rails: dict[int, str] | None = None, **gpu) -> dict:
    p = copy.deepcopy(base)
    p["hardware"]["gpu"].update(gpu)
    if rails is not None:
        p["hardware"]["nics"] = [
            {**p["hardware"]["nics"][0], "hca": hca, "gpu": g} for g, hca in rails.items()
        ]
    return p


# devopsrustem/slurmv4 node tpgds-aihub0007: 8x H100, 12 mlx5 NICs, numa=off. Its rails as
# the matrix shows them (GPU3 sits beside mlx5_5: mlx5_3/mlx5_4 are a dual-port card).
AIHUB_RAILS = dict(enumerate(["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_5", "mlx5_6", "mlx5_7",
                              "mlx5_8", "mlx5_11"]))  # fmt: skip


def test_real_8gpu_node_wired_as_its_profile_says_passes():
    text = (TOPO / "h100-8gpu-12nic-numa-off-all-node.txt").read_text()
    f = _judge(text, _profile(H100, AIHUB_RAILS, numa_nodes=[0] * 8))
    assert f.status == "PASS", f


def test_real_8gpu_node_against_the_shipped_profile_names_gpu_and_nics():
    text = (TOPO / "h100-8gpu-12nic-numa-off-all-node.txt").read_text()
    f = _judge(text, H100)
    assert f.status == "FAIL", f
    assert "GPU3: its rail NIC mlx5_3 is NODE, expected PIX/PXB; beside it instead: mlx5_5" in (
        f.reason
    )
    assert "GPU7: its rail NIC mlx5_7 is NODE" in f.reason
    assert "GPU4 on NUMA node 0, expected 1" in f.reason  # booted with numa=off


def test_numa_affinity_alone_is_a_warning():
    text = (TOPO / "h100-8gpu-12nic-numa-off-all-node.txt").read_text()
    f = _judge(text, _profile(H100, AIHUB_RAILS))  # profile: GPUs 4-7 on NUMA node 1
    assert f.status == "WARN", f
    assert f.reason.startswith("GPU4 on NUMA node 0, expected 1") and "numa=" in f.action


def test_real_gpu_whose_nics_are_all_node_fails():
    # schmaustech R760xa (topo -mp): the GPU reaches every NIC through the host bridge only
    text = (TOPO / "r760xa-1gpu-10nic-topo-mp-gpu-nic-node.txt").read_text()
    p = _profile(load_profile("l40s-pcie-4gpu"), {0: "mlx5_0"}, count=1, numa_nodes=[0])
    f = _judge(text, p)
    assert f.status == "FAIL", f
    assert f.reason == "GPU0: its rail NIC mlx5_0 is NODE, expected PIX/PXB"


def test_real_nvlink_bridge_pair_is_a_complete_mesh():
    text = (TOPO / "h100-pcie-2gpu-nv12-bridge.txt").read_text()
    p = _profile(H100, {}, count=2, numa_nodes=[1, 1])
    assert _judge(text, p).status == "PASS"


@pytest.fixture
def node(tmp_path):
    return full_node(tmp_path)


def _emulated(node, tmp_path, *faults):
    for f in faults:
        node.run("ctl", "fault", "add", *f.split(), check=True)
    ev = collect(node, tmp_path, "none")
    (f,) = rules.evaluate(ev, ctx(node, "none"), only=["TOP-001"])
    return f


def test_topo_is_collected_in_the_same_round_trip():
    assert {p.file: p.command for p in state_probes(H100)}[TOPO_FILE] == "nvidia-smi topo -m"


def test_healthy_emulated_node_passes(node, tmp_path):
    f = _emulated(node, tmp_path)
    assert f.status == "PASS", f


def test_swapped_nics_fail_naming_gpu_and_nic(node, tmp_path):
    f = _emulated(node, tmp_path, "nic-swap mlx5_0 mlx5_4")
    assert f.status == "FAIL", f
    assert f.reason == (
        "GPU0: its rail NIC mlx5_0 is SYS, expected PIX/PXB; beside it instead: mlx5_4; "
        "GPU4: its rail NIC mlx5_4 is SYS, expected PIX/PXB; beside it instead: mlx5_0"
    )
    assert f.action == rules.RULES_BY_ID["TOP-001"].action


def test_a_gpu_off_the_nvlink_mesh_fails(node, tmp_path):
    f = _emulated(node, tmp_path, "nvlink-down 1")
    assert f.status == "FAIL" and "GPU0-GPU1 NODE, not NVLink" in f.reason, f


@pytest.mark.parametrize("text", ["", "GPU0\tX\n", "\tGPU0\tGPU1\nGPU0\t X \tNV18\n"])
def test_unreadable_matrix_is_error(text):
    f = _judge(text, H100)
    assert f.status == "ERROR", f


def test_profile_topology_keys_are_checked():
    p = copy.deepcopy(H100)
    assert p["hardware"]["topology"] == {"rail_links": ["PIX", "PXB"], "nvlink_mesh": True}
    p["hardware"]["topology"]["rail_links"] = ["PIX", "NEAR"]
    with pytest.raises(ConfigError, match="rail_links"):
        validate(p, "test")


# gengwg/cheatsheets DGX A100: NIC columns named mlx5_*, rails at PXB, two GPUs per NIC pair
DGX_A100_RAILS = dict(enumerate(["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7",
                                 "mlx5_8", "mlx5_9"]))  # fmt: skip


def test_real_dgx_a100_with_its_rails_passes_and_the_one_nic_per_gpu_profile_fails():
    text = (TOPO / "dgx-a100-8gpu-12nic-mlx5-columns-pxb.txt").read_text()
    a100 = load_profile("a100-sxm4-8gpu")  # NUMA 3,3,1,1,7,7,5,5 as on the DGX
    assert _judge(text, _profile(a100, DGX_A100_RAILS)).status == "PASS"
    f = _judge(text, a100)  # the shipped profile: mlx5_N beside GPU N
    assert f.status == "FAIL", f
    assert f.reason.startswith(
        "GPU4: its rail NIC mlx5_4 is SYS, expected PIX/PXB; beside it instead: mlx5_6, mlx5_7"
    )
    assert "GPU0" not in f.reason  # mlx5_0 is at PXB from GPU0: a rail
