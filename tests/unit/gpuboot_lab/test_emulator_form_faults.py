"""The emulator's faults for forms an operator hands in: a GPU nvidia-smi lost (ERR! in the
table, lost in -q), an ib_write_bw run aborted part way, nvbandwidth stopped by its own
ASSERT. Each output is judged by gpuboot's readers and rules as the real one is: FAIL naming
the GPU, ERROR naming the abort, ERROR naming the testcase."""

from __future__ import annotations

import json
import time

import pytest

from gpuboot.certify import evaluate_bundle
from gpuboot.evidence import parse_ib_write_bw, parse_nvbandwidth_json, parse_nvbandwidth_text
from gpuboot.evidence.nvidia_smi_table import parse_nvidia_smi_table
from tests.unit.gpuboot_lab._emu import free_port, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

D2D_READ = "device_to_device_memcpy_read_ce"


def _judged(tmp_path, profile: str, files: dict[str, str], **meta) -> dict[str, dict]:
    """The findings of a bundle of these outputs, as an operator hands them in."""
    host = tmp_path / "bundle" / "n1"
    host.mkdir(parents=True)
    for name, text in files.items():
        (host / name).write_text(text)
    (host / "meta.json").write_text(json.dumps({"host": "n1", "profile": profile, **meta}))
    (node,) = evaluate_bundle(str(tmp_path / "bundle"), ignore_manifest=True).to_dict()["nodes"]
    return {f["rule"]: f for f in node["findings"]}


def test_gpu_err_is_err_in_the_table_and_lost_in_q(tmp_path):
    node = make_node(tmp_path)
    node.run("ctl", "fault", "add", "gpu-err", "3", check=True)
    table, q = node.run("nvidia-smi"), node.run("nvidia-smi", "-q")
    assert table.rc == 0 and q.rc == 15  # nvidia-smi(1): 15, a GPU fallen off the bus
    (erring,) = [g for g in parse_nvidia_smi_table(table.out).gpus if g.errors]
    assert (erring.index, erring.bus_id) == (3, "00000000:5D:00.0")
    assert set(erring.errors) >= {"ECC", "fan", "temperature", "power", "utilization"}
    got = _judged(tmp_path, "hgx-h100-sxm-8gpu", {"nvidia-smi.txt": table.out})
    assert (
        got["GPU-001"]["status"] == "FAIL"
        and "GPU 3 (00000000:5D:00.0) shows ERR!" in (got["GPU-001"]["reason"])
    )
    assert "Unable to determine the device handle for GPU0000:5D:00.0" in q.out
    got = _judged(tmp_path / "q", "hgx-h100-sxm-8gpu", {"nvidia-smi_-q.txt": q.out})
    assert (
        got["GPU-001"]["status"] == "FAIL" and "GPU 0000:5D:00.0 lost" in (got["GPU-001"]["reason"])
    )
    node.run("ctl", "fault", "clear", "gpu-err", check=True)
    assert "ERR!" not in node.run("nvidia-smi").out


def test_perftest_abort_prints_rows_then_the_completion_error(tmp_path):
    a, b = make_node(tmp_path / "a"), make_node(tmp_path / "b")
    b.run("ctl", "fault", "add", "perftest-abort", "12", check=True)
    port = free_port()
    server = a.popen("ib_write_bw", "-a", "--report_gbits", "-p", str(port))
    time.sleep(0.3)
    res = b.run("ib_write_bw", "-a", "--report_gbits", "-p", str(port), "127.0.0.1")
    server.communicate(timeout=20)
    assert res.rc == 1
    assert res.err.splitlines() == [
        " Completion with error at client",
        " Failed status 12: wr_id 0 syndrom 0x88",
        "scnt=128, ccnt=0",
        " Failed to complete run_iter_bw function successfully",
    ]
    captured = res.out + res.err  # what `ib_write_bw ... 2>&1` leaves in a ticket
    parsed = parse_ib_write_bw(captured)
    assert parsed.aborted and parsed.runs[0].rows  # rows printed before the abort
    got = _judged(
        tmp_path, "hgx-h100-sxm-8gpu", {"ib_write_bw.txt": captured}, pins={"doca_ofed_enabled": 1}
    )
    assert got["BW-005"]["status"] == "ERROR"
    assert "ib_write_bw aborted after" in got["BW-005"]["reason"]
    assert "Failed status 12" in got["BW-005"]["reason"]


def test_nvbandwidth_assert_stops_at_its_testcase(tmp_path):
    node = make_node(tmp_path, profile="l40s-pcie-4gpu")  # no NVSwitch: no fabric manager
    node.run("ctl", "fault", "add", "nvbandwidth-assert", check=True)
    text = node.run("nvbandwidth")
    assert text.rc == 1 and text.out.rstrip().endswith("/nvbandwidth/memcpy.cpp:165")
    run = parse_nvbandwidth_text(text.out)
    assert run.tests[-1].name == D2D_READ and run.tests[-1].status == "Error"
    assert run.tests[0].passed  # the testcases before it ran
    got = _judged(tmp_path, "l40s-pcie-4gpu", {"nvbandwidth.txt": text.out})
    assert got["BW-003"]["status"] == "ERROR"
    assert f"{D2D_READ} Error: ASSERT in expression" in got["BW-003"]["reason"]
    as_json = node.run("nvbandwidth", "-j", "-t", D2D_READ)
    assert as_json.rc == 1
    doc = json.loads(as_json.out[as_json.out.index("{") :])["nvbandwidth"]
    assert doc["error"].startswith("ASSERT in expression h_errorFlag == 0")
    (stopped,) = parse_nvbandwidth_json(as_json.out).tests
    assert (stopped.name, stopped.status) == (D2D_READ, "Error")
    assert stopped.error.startswith("ASSERT in expression h_errorFlag == 0")
