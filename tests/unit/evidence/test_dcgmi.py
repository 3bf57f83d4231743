from __future__ import annotations

import json

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.dcgmi import parse_dcgmi_diag_json, parse_dcgmi_diag_text

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("dcgmi_diag"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    assert parse_dcgmi_diag_text(path.read_text()).results


def test_h200_r3_all_pass(read):
    r = parse_dcgmi_diag_text(read("dcgmi_diag/h200-8gpu-r3-all-pass.txt"))
    assert r.metadata["DCGM Version"] == "3.3.9"
    assert r.metadata["Driver Version Detected"] == "570.133.20"
    assert r.failed == () and r.warned == ()
    assert r.result("PCIe") == "Pass" and r.result("EUD Test") == "Skip"
    assert r.result("Memory Bandwidth") == "Pass"
    cats = {x.category for x in r.results}
    assert cats == {"Deployment", "Integration", "Hardware", "Stress"}
    assert len(r.results) == 16
    assert next(x for x in r.results if x.test == "Targeted Power").scope == "All"


# JSON shape of `dcgmi diag -j` (DCGM 3.x root key); values illustrative, not a capture.
_JSON = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}],
            },
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "GPU Memory",
                        "results": [
                            {"gpu_id": "0", "status": "Pass"},
                            {
                                "gpu_id": "1",
                                "status": "Fail",
                                "warnings": [{"warning": "DBE detected", "error_id": 21}],
                            },
                        ],
                    }
                ],
            },
        ],
        "version": "3.3.9",
    }
}


def test_json_fail_per_gpu():
    r = parse_dcgmi_diag_json(json.dumps(_JSON))
    assert r.failed == ("GPU Memory",)
    bad = next(x for x in r.results if x.result == "Fail")
    assert bad.gpu_id == "1" and bad.detail == "DBE detected"
    assert r.metadata["version"] == "3.3.9"
    dcgm4 = {"DCGM Diagnostic": _JSON["DCGM GPU Diagnostic"]}
    assert parse_dcgmi_diag_json(json.dumps(dcgm4)).failed == ("GPU Memory",)


@pytest.mark.parametrize("text", ["", "Error: unable to connect to host engine\n", "{}", "[1]"])
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_dcgmi_diag_text(text)
    with pytest.raises(ParseError):
        parse_dcgmi_diag_json(text)
