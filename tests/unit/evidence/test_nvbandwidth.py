from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.nvbandwidth import parse_nvbandwidth_json, parse_nvbandwidth_text

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("nvbandwidth"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    assert parse_nvbandwidth_json(path.read_text()).tests


def test_single_gpu_json(read):
    r = parse_nvbandwidth_json(read("nvbandwidth/1gpu-json-j-all-tests-pcie-12GBps.json"))
    assert (r.version, r.driver_version, r.cuda_runtime_version) == ("v0.5", "565.02", 12070)
    h2d = r.test("host_to_device_memcpy_ce")
    assert h2d.passed and h2d.unit == "GB/s" and h2d.matrix == ((12.3964,),)
    assert h2d.sum == pytest.approx(12.396, abs=1e-3)
    assert r.test("device_to_host_memcpy_ce").matrix[0][0] == 13.2001
    waived = {t.name for t in r.tests if t.status == "Waived"}
    assert "device_to_device_memcpy_read_ce" in waived and "all_to_one_write_ce" in waived
    assert all(t.matrix == () for t in r.tests if t.status == "Waived")
    lat = r.test("host_device_latency_sm")
    assert lat.unit == "ns" and lat.matrix[0][0] == 649.879


# Plain-text layout as in the nvbandwidth README (values illustrative, not a capture).
_TEXT = """\
nvbandwidth Version: v0.5
Built from Git version:

CUDA Runtime Version: 12040
CUDA Driver Version: 12040
Driver Version: 550.54.15

Device 0: NVIDIA H100 80GB HBM3 (00000000:19:00)
Device 1: NVIDIA H100 80GB HBM3 (00000000:3b:00)

Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     55.21     55.30

SUM host_to_device_memcpy_ce 110.51

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    389.10
 1    389.20       N/A

SUM device_to_device_memcpy_read_ce 778.30
"""


def test_text_matrix():
    r = parse_nvbandwidth_text(_TEXT)
    assert r.driver_version == "550.54.15" and r.cuda_runtime_version == 12040
    h2d = r.test("host_to_device_memcpy_ce")
    assert h2d.matrix == ((55.21, 55.30),) and h2d.sum == 110.51 and h2d.passed
    d2d = r.test("device_to_device_memcpy_read_ce")
    assert d2d.matrix == ((None, 389.10), (389.20, None))


@pytest.mark.parametrize("text", ["", "{}", '{"nvbandwidth": {}}', "not json"])
def test_garbage_json_raises(text):
    with pytest.raises(ParseError):
        parse_nvbandwidth_json(text)


@pytest.mark.parametrize("text", ["", "hello\n", "nvbandwidth Version: v0.5\n"])
def test_garbage_text_raises(text):
    with pytest.raises(ParseError):
        parse_nvbandwidth_text(text)


def test_own_assertion_stops_a_testcase_as_error(read):
    r = parse_nvbandwidth_text(
        read("nvbandwidth_text/a100-sxm4-80gb-8gpu-v0.7-d2d-read-ce-assert-pattern.txt")
    )
    (t,) = r.tests
    assert t.name == "device_to_device_memcpy_read_ce" and t.status == "Error"
    assert t.error.startswith("ASSERT in expression h_errorFlag == 0") and not t.matrix


def test_cuda_error_stops_a_testcase_as_error(read):
    r = parse_nvbandwidth_text(
        read("nvbandwidth_text/rtx3080-1gpu-v0.8-d2h-ce-cuda-error-invalid-context.txt")
    )
    (t,) = r.tests
    assert t.status == "Error" and t.error.startswith("[CUDA_ERROR_INVALID_CONTEXT]")


def test_sm_copy_testcase_reads_like_the_ce_one(read):
    r = parse_nvbandwidth_text(read("nvbandwidth_text/a100-sxm4-40gb-1gpu-v0.8-h2d-sm-25GBps.txt"))
    (t,) = r.tests
    assert t.name == "host_to_device_memcpy_sm" and t.passed and t.matrix == ((25.13,),)


# nvbandwidth -j stopped by its own ASSERT: the assertion lands under the document's "error"
# (json_output.cpp's recordErrorCurrentTest misses the testcases), the testcase stays "Running".
_JSON_STOPPED = """Invalid value when checking the pattern at 0x7f2c
{
\t"nvbandwidth" :
\t{
\t\t"CUDA Runtime Version" : 12040,
\t\t"Driver Version" : "550.54.15",
\t\t"error" : "ASSERT in expression h_errorFlag == 0 in void MemPtrChunk::check()\\n",
\t\t"testcases" :
\t\t[
\t\t\t{
\t\t\t\t"bandwidth_description" : "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
\t\t\t\t"bandwidth_matrix" : [ [ "55.2", "55.3" ] ],
\t\t\t\t"name" : "host_to_device_memcpy_ce",
\t\t\t\t"status" : "Passed",
\t\t\t\t"sum" : 110.5
\t\t\t},
\t\t\t{
\t\t\t\t"name" : "device_to_device_memcpy_read_ce",
\t\t\t\t"status" : "Running"
\t\t\t}
\t\t]
\t}
}
"""


def test_json_document_error_stops_the_testcase_left_running():
    r = parse_nvbandwidth_json(_JSON_STOPPED)
    assert r.test("host_to_device_memcpy_ce").passed
    stopped = r.test("device_to_device_memcpy_read_ce")
    assert stopped.status == "Error"
    assert stopped.error == "ASSERT in expression h_errorFlag == 0 in void MemPtrChunk::check()"


@pytest.mark.parametrize("cases", ['"x"', "[1, 2]", '["a"]'])
def test_testcases_that_are_not_objects_raise(cases):
    with pytest.raises(ParseError):
        parse_nvbandwidth_json(f'{{"nvbandwidth": {{"testcases": {cases}}}}}')
