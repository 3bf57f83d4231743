from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.nccl import parse_all_reduce_perf

from .conftest import capture_files

D = "nccl_all_reduce_perf/"


@pytest.mark.parametrize("path", capture_files("nccl_all_reduce_perf"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    r = parse_all_reduce_perf(path.read_text())
    assert r.rows and r.completed and r.out_of_bounds == 0 and r.out_of_bounds_ok


def test_a3mega_healthy(read):
    r = parse_all_reduce_perf(read(D + "h100-a3mega-2node-16gpu-tcpxo-healthy.txt"))
    assert r.layout == "new" and len(r.ranks) == 16 and len(r.hosts) == 2
    assert r.avg_busbw_gbytes_s == 70.742
    last = r.row_for(8589934592)
    assert last.out_of_place.busbw_gbytes_s == 338.82 and last.in_place.busbw_gbytes_s == 337.35
    assert last.root == -1 and last.out_of_place.wrong == 0
    assert r.rows[0].size_bytes == 8 and r.wrong_total == 0


def test_h200_single_nic_plateau_and_version_line(read):
    r = parse_all_reduce_perf(read(D + "h200-2node-16gpu-single-shared-rdma-nic-busbw92.txt"))
    assert r.nccl_version == "2.27.3+cuda12.9"
    assert r.avg_busbw_gbytes_s == 36.2205
    assert r.row_for(17179869184).busbw_gbytes_s == 92.35
    assert 92 < r.peak_busbw_gbytes_s < 93


def test_l40s_tcp_low(read):
    r = parse_all_reduce_perf(read(D + "l40s-2node-2gpu-ib-disabled-tcp-busbw8.txt"))
    assert len(r.ranks) == 2 and r.peak_busbw_gbytes_s == 8.14
    assert r.avg_busbw_gbytes_s == 3.98762
    assert r.params["maxBytes"] == "17179869184"  # header value; the run reduced it


def test_l40s_4_ranks(read):
    r = parse_all_reduce_perf(read(D + "l40s-2node-4gpu-busbw9.6.txt"))
    assert len(r.ranks) == 4 and r.params["nGpus"] == "2"
    assert r.row_for(8589934592).out_of_place.busbw_gbytes_s == 9.63


def test_old_layout(read):
    r = parse_all_reduce_perf(read(D + "a100-sxm4-40gb-8gpu-single-node-old-format-busbw235.txt"))
    assert r.layout == "old" and len(r.ranks) == 8 and r.hosts == ("localhost",)
    assert r.rows[0].size_bytes == 0 and r.rows[0].root is None
    assert len(r.rows) == 34  # two zero-byte rows, stray "NCCL INFO" line skipped
    assert r.rows[-1].out_of_place.busbw_gbytes_s == 235.26
    assert r.rows[-1].out_of_place.max_error is None and r.rows[-1].out_of_place.wrong is None
    assert r.avg_busbw_gbytes_s == 68.4048 and r.params["validation"] == "0"
    assert r.params["warmup iters"] == "5" and r.params["iters"] == "20"


def test_single_size_row(read):
    r = parse_all_reduce_perf(read(D + "a100-oci-2node-16gpu-roce-10GB-single-size-busbw164.txt"))
    (row,) = r.rows
    assert row.size_bytes == 10737418240 and row.in_place.busbw_gbytes_s == 165.21
    assert r.avg_busbw_gbytes_s == 164.643


def test_oci_h100(read):
    r = parse_all_reduce_perf(read(D + "h100-oci-bm-gpu-h100-8-2node-roce-healthy.txt"))
    assert len(r.rows) == 5 and r.avg_busbw_gbytes_s == 458.452
    assert min(row.busbw_gbytes_s for row in r.rows) > 445


def test_wrong_results_and_oob_failure(read):
    # Real capture with the #wrong cells and OOB line edited in memory to exercise the
    # wrong-result path (no published capture with wrong results is in the corpus).
    text = read(D + "a100-oci-2node-16gpu-roce-10GB-single-size-busbw164.txt")
    text = text.replace("164.07      0 ", "164.07     12 ").replace("0 OK", "1 FAILED")
    r = parse_all_reduce_perf(text)
    assert r.wrong_total == 12 and r.rows[0].out_of_place.wrong == 12
    assert r.out_of_bounds == 1 and r.out_of_bounds_ok is False


def test_crash_is_a_failure_not_a_zero():
    text = (
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 5\n"
        "node1: Test NCCL failure common.cu:1005 'unhandled system error'\n"
    )
    r = parse_all_reduce_perf(text)
    assert r.failures and not r.completed and r.rows == ()


@pytest.mark.parametrize("text", ["", "hello\n", "# nThread 1 nGpus 1\n# Using devices\n"])
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_all_reduce_perf(text)


def test_truncated_row_raises(read):
    text = read(D + "h100-oci-bm-gpu-h100-8-2node-roce-healthy.txt").replace(
        "464.57      0    69305", "464.57"
    )
    with pytest.raises(ParseError):
        parse_all_reduce_perf(text)
