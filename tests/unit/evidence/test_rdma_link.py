from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.rdma_link import parse_rdma_link

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("rdma_link"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    assert parse_rdma_link(path.read_text())


def test_roce_links_with_and_without_netdev(read):
    links = parse_rdma_link(read("rdma_link/gke-a3ultra-8-links-active-one-netdev.txt"))
    assert [lk.device for lk in links] == [f"mlx5_{i}" for i in range(8)]
    assert all(lk.active and lk.physical_state == "LINK_UP" and lk.port == 1 for lk in links)
    assert [lk.netdev for lk in links if lk.netdev] == ["gpu3rdma0"]


def test_infiniband_port_down_polling(read):
    (lk,) = parse_rdma_link(read("rdma_link/ib-mlx5_7-down-polling.txt"))
    assert (lk.device, lk.state, lk.physical_state) == ("mlx5_7", "DOWN", "POLLING")
    assert not lk.active and lk.fields["lid"] == "3403"


def test_a_line_cut_short_is_unreadable():
    with pytest.raises(ParseError, match="line 2"):
        parse_rdma_link("link mlx5_0/1 state ACTIVE physical_state LINK_UP\nlink mlx5_1/1 state")
