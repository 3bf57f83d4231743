"""`show_gids` and `ethtool -S` on real captures (captures/SOURCES-extra.md)."""

from __future__ import annotations

import pytest

from gpuboot.checks.roce_rules import roce_counters
from gpuboot.errors import ParseError
from gpuboot.evidence.ethtool_stats import parse_ethtool_stats
from gpuboot.evidence.show_gids import parse_show_gids


def test_show_gids_rows_versions_and_netdevs(read):
    t = parse_show_gids(read("show_gids/mi355-roce-8-nics-v2-gids-excerpt.txt"))
    assert len(t.gids) == 10 and not t.complete  # the excerpt ends before the trailer
    last = t.gids[-1]
    assert (last.device, last.port, last.index, last.version, last.netdev) == (
        "rocep193s0f0",
        1,
        1,
        "v2",
        "enp193s0f0np0",
    )
    assert {g.version for g in t.gids if g.netdev == "enp193s0f0np0"} == {"v1", "v2"}


def test_show_gids_with_no_gid_is_complete_and_empty(read):
    t = parse_show_gids(read("show_gids/cx4lx-pod-calico-no-gids.txt"))
    assert t.gids == () and t.complete


def test_show_gids_row_cut_mid_line_is_unreadable():
    with pytest.raises(ParseError, match="line 2"):
        parse_show_gids("DEV\tPORT\tINDEX\tGID\nmlx5_0\t1\t3\tfe80:0000")


def test_ethtool_stats_reads_every_counter(read):
    s = parse_ethtool_stats(read("ethtool_S/cx4-mlx5-ubuntu1804-head-excerpt.txt"))
    assert len(s.counters) == 23 and s.counters["rx_csum_none"] == 49455


def test_rx_out_of_buffer_is_recorded_as_agreed_with_the_trends(read):
    s = parse_ethtool_stats(read("ethtool_S/cx-enp193s0f0np0-rx-out-of-buffer-48-grep.txt"))
    assert roce_counters("enp193s0f0np0", s.counters) == [
        {
            "kind": "counter",
            "name": "roce.enp193s0f0np0.rx_out_of_buffer",
            "device": "enp193s0f0np0",
            "counter": "rx_out_of_buffer",
            "value": 48,
            "unit": "packets",
            "source": "rx_out_of_buffer",
        }
    ]


def test_per_priority_pause_frames_are_summed_when_the_port_counter_is_absent():
    got = roce_counters("eth2", {"rx_prio3_pause": 5, "rx_prio4_pause": 2, "tx_pause_ctrl_phy": 9})
    by = {m["counter"]: (m["value"], m["source"]) for m in got}
    assert by == {
        "rx_pause_frames": (7, "rx_prio3_pause+rx_prio4_pause"),
        "tx_pause_frames": (9, "tx_pause_ctrl_phy"),
    }


def test_a_line_that_is_no_counter_is_unreadable():
    with pytest.raises(ParseError, match="line 2"):
        parse_ethtool_stats("NIC statistics:\n     rx_out_of_buf")
