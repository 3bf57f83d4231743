"""Calibration: medians of hardware-healthy nodes become bands the checks then use."""

from gpuboot.calibrate import calibrate
from gpuboot.checks.thresholds import band
from gpuboot.profiles import load_profile
from gpuboot.results import RunReport


def node(host, h2d, *, broken=False):
    findings = [
        {"rule": "GPU-001", "status": "FAIL" if broken else "PASS"},
        {"rule": "BW-001", "status": "FAIL" if h2d < 44 else "PASS"},
    ]
    return {
        "host": host,
        "findings": findings,
        "measurements": [
            {
                "name": "nvbandwidth_h2d",
                "value": h2d,
                "expected": 55.0,
                "warn_below": 49.5,
                "fail_below": 44.0,
            }
        ],
    }


def test_median_of_healthy_nodes_with_the_profile_band_widths():
    # A variant whose PCIe path tops out at ~40 GB/s: every node fails the published band.
    report = {
        "nodes": [node("a", 40.0), node("b", 41.0), node("c", 39.0), node("d", 12.0, broken=True)]
    }
    out = calibrate(RunReport.from_dict(report), min_nodes=3)
    assert out["excluded_nodes"] == ["d"]  # a GPU check failed: not a baseline
    assert out["gpuboot_thresholds"]["nvbandwidth_h2d"] == {
        "expected": 40.0,
        "warn_below": 36.0,
        "fail_below": 32.0,
    }
    profile = load_profile("hgx-h100-sxm-8gpu")
    b = band("nvbandwidth_h2d", profile, {"gpuboot_thresholds": out["gpuboot_thresholds"]})
    assert (b.expected, b.warn_below, b.fail_below) == (40.0, 36.0, 32.0)
    assert b.status(39.0) == "PASS" and b.status(30.0) == "FAIL"


def test_too_few_nodes_leaves_the_figure_alone():
    out = calibrate(RunReport.from_dict({"nodes": [node("a", 40.0), node("b", 41.0)]}), min_nodes=3)
    assert out["gpuboot_thresholds"] == {}
    assert "need 3" in out["skipped"]["nvbandwidth_h2d"]
