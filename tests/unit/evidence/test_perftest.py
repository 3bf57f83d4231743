from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.perftest import MB_PER_S_TO_GBIT_S, parse_ib_write_bw

from .conftest import capture_files

D = "ib_write_bw/"


@pytest.mark.parametrize("path", capture_files("ib_write_bw"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    r = parse_ib_write_bw(path.read_text())
    assert r.runs or r.errors


def test_a40_duration_mode_16qp(read):
    r = parse_ib_write_bw(read(D + "a40-roce-gpudirect-cuda-dmabuf-16qp-client-181gbps.txt"))
    (run,) = r.runs
    assert not r.failed and run.reported_unit == "Gb/sec"
    assert run.device == "mlx5_1" and run.qps == 16 and run.mtu_bytes == 1024
    assert run.settings["Link type"] == "Ethernet"
    (row,) = run.rows
    assert row.bw_average_gbits_s == 181.46 and row.bw_peak_gbits_s == 0.0
    assert any("Requested mtu is higher than active mtu" in w for w in r.warnings)
    assert r.bw_average_gbits_s == 181.46


def test_h100_sweep_plateau(read):
    r = parse_ib_write_bw(read(D + "h100-gdr-roce-200g-dmabuf-a-sweep-197gbps.txt"))
    (run,) = r.runs
    assert len(run.rows) == 23 and run.rows[0].size_bytes == 2
    assert run.rows[-1].size_bytes == 8388608 and run.rows[-1].bw_average_gbits_s == 197.87
    assert r.bw_average_gbits_s == 197.87 and run.mtu_bytes == 4096 and run.qps == 1


def test_h100_gpu3_degraded(read):
    r = parse_ib_write_bw(read(D + "h100-gdr-roce-openshift-gpu3-67gbps-degraded.txt"))
    assert 67 < r.bw_average_gbits_s < 68 and not r.errors


def test_mb_per_sec_converted_to_gbits(read):
    r = parse_ib_write_bw(read(D + "hdr-ib0-loopback-8MB-server-client-interleaved-24GBps.txt"))
    assert len(r.runs) == 2  # server and client blocks
    for run in r.runs:
        assert run.reported_unit == "MB/sec" and run.device == "ib0"
        (row,) = run.rows
        assert row.size_bytes == 8388608
        # MB = 10^6 bytes (perftest's own unit): 24056.72 MB/s -> 192.5 Gb/s (201.8 if read as MiB)
        assert row.bw_average_gbits_s == pytest.approx(24056.72 * MB_PER_S_TO_GBIT_S)
        assert 192 < row.bw_average_gbits_s < 193


def test_rdma_cm_failure_is_failure_not_zero(read):
    r = parse_ib_write_bw(read(D + "rdma-cm-connection-failure-unexpected-cm-event.txt"))
    assert r.failed and r.bw_average_gbits_s is None and r.runs == ()
    assert "Unable to init the socket connection" in r.errors
    assert any("Unexpected CM event" in e for e in r.errors)


@pytest.mark.parametrize("text", ["", "hello\n", "                    RDMA_Write BW Test\n"])
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_ib_write_bw(text)


def test_run_aborted_after_rows_names_the_abort(read):
    """Rows for 16 sizes, then a completion error: the run aborted, its rows stay readable."""
    r = parse_ib_write_bw(read(D + "h200-roce-a-sweep-aborted-completion-error-status10.txt"))
    (run,) = r.runs
    assert len(run.rows) == 16 and run.rows[-1].bw_average_gbits_s == 381.41
    assert r.aborted == "Completion with error at client"
    assert r.errors[-1] == "Failed to complete run_iter_bw function successfully"


def test_a_failed_connection_is_no_abort(read):
    r = parse_ib_write_bw(read(D + "rdma-cm-connection-failure-unexpected-cm-event.txt"))
    assert r.failed and r.aborted is None
