from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.topo import parse_topo_matrix

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("topo_m"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    m = parse_topo_matrix(path.read_text())
    assert "GPU0" in m.gpus
    assert all(m.link(d, d) == "X" for d in m.devices)


def test_single_gpu_ansi_header(read):
    m = parse_topo_matrix(read("topo_m/h100-single-gpu-vm-ansi.txt"))
    assert m.devices == ("GPU0",)
    assert m.rows["GPU0"].cpu_affinity == "0-19" and m.rows["GPU0"].numa_affinity == "0"
    assert m.rows["GPU0"].gpu_numa_id is None


def test_pcie_nv12_bridge_space_separated(read):
    m = parse_topo_matrix(read("topo_m/h100-pcie-2gpu-nv12-bridge.txt"))
    assert m.devices == ("GPU0", "GPU1") and m.nics == ()
    assert m.nvlink_count("GPU0", "GPU1") == 12
    assert {m.rows[g].numa_affinity for g in m.gpus} == {"1"}
    assert m.rows["GPU1"].cpu_affinity == "32-63,96-127"


def test_r760xa_gpu_nic_node_only(read):
    m = parse_topo_matrix(read("topo_m/r760xa-1gpu-10nic-topo-mp-gpu-nic-node.txt"))
    assert m.gpus == ("GPU0",) and len(m.nics) == 10
    assert {m.link("GPU0", n) for n in m.nics} == {"NODE"}
    assert m.nics_of("GPU0") == ()
    assert m.link("NIC1", "NIC9") == "PIX" and m.link("NIC0", "NIC1") == "NODE"
    assert m.nic_names["NIC9"] == "mlx5_9"
    assert m.rows["NIC0"].cpu_affinity is None


def test_h100_8gpu_12nic(read):
    m = parse_topo_matrix(read("topo_m/h100-8gpu-12nic-numa-off-all-node.txt"))
    assert len(m.gpus) == 8 and len(m.nics) == 12
    assert all(m.nvlink_count(a, b) == 18 for a in m.gpus for b in m.gpus if a != b)
    assert all(len(m.nics_of(g)) == 1 for g in m.gpus)
    assert m.nics_of("GPU3") == ("NIC5",) and m.nic_names["NIC5"] == "mlx5_5"
    assert {m.rows[g].cpu_affinity for g in m.gpus} == {"0-191"}
    assert {m.rows[g].numa_affinity for g in m.gpus} == {"0"}


@pytest.mark.parametrize("text", ["", "garbage\n", "\tGPU0\tGPU1\nGPU0\t X \n"])
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_topo_matrix(text)
