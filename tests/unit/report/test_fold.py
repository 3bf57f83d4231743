"""Long per-link reasons folded by GPU and link ranges, on the reasons the NVLink rules give
(tests/fixtures/reasons/SOURCES.md): what a terminal and a ticket show; --json keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuboot import cli
from gpuboot.report.fold import fold_reason, ranges

REASONS = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "reasons" / "nvlink-emulator.json").read_text()
)
REAL_NVLINK = Path(__file__).parents[2] / "fixtures" / "bundles" / "real-nvlink"


def test_ranges_fold_consecutive_numbers():
    assert ranges([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert ranges([5]) == "5" and ranges([]) == ""


def test_nvl002_on_every_link_of_every_gpu_is_one_part():
    reason = REASONS["every-gpu-nvlink-down"]["NVL-002"]
    assert len(reason) > 9000 and reason.count(";") == 8 * 18 - 1  # every link listed
    assert fold_reason(reason) == (
        "GPU 0-7 links 0-17: crc_errors 57, recovery_errors 3, replay_errors 12"
    )


def test_nvl002_on_one_gpu_about_1400_characters_fits_a_line():
    reason = REASONS["gpu1-nvlink-down"]["NVL-002"]
    assert len(reason) > 1000
    assert (
        fold_reason(reason)
        == "GPU 1 links 0-17: crc_errors 57, recovery_errors 3, replay_errors 12"
    )


def test_differing_counts_show_their_range():
    reason = (
        "GPU 0 link 0: crc_errors=5, replay_errors=1; GPU 0 link 1: crc_errors=812, replay_errors=1"
    )
    assert fold_reason(reason) == "GPU 0 links 0-1: crc_errors 5-812, replay_errors 1"


def test_gpus_sharing_words_are_one_part():
    assert (
        fold_reason(REASONS["every-gpu-nvlink-down"]["NVL-001"]) == "GPU 0-7: all NVLinks inactive"
    )


@pytest.mark.parametrize(
    ("host", "folded"),
    [
        ("v100-6-links-inactive",
         "GPU 3 links 3,5 inactive; GPU 4,6 link 1 inactive; GPU 5 links 0,4 inactive"),
        ("h100-pcie-bridge-naive-profile", "GPU 0-1 links 4-5,10-11,16-17 inactive"),
        ("a100-gpu6-all-inactive", "GPU 6: all NVLinks inactive"),
    ],
)  # fmt: skip
def test_nvl001_on_real_captures(host, folded, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path))
    cli.main(["evaluate", "--bundle", str(REAL_NVLINK), "--ignore-manifest", "--json"])
    nodes = {n["host"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    reason = next(f["reason"] for f in nodes[host]["findings"] if f["rule"] == "NVL-001")
    assert fold_reason(reason) == folded


def test_other_parts_stay_whole_and_in_place():
    reason = "GPU 0000:18:00.0 lost: its NVLinks cannot be read; GPU 1: link(s) 2 inactive"
    assert fold_reason(reason) == (
        "GPU 0000:18:00.0 lost: its NVLinks cannot be read; GPU 1 link 2 inactive"
    )
    assert fold_reason("driver 550.40.07 running, 550.54.15 pinned") == (
        "driver 550.40.07 running, 550.54.15 pinned"
    )
