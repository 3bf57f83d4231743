from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.nvlink import parse_nvlink_errors, parse_nvlink_status

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("nvlink_s"), ids=lambda p: p.name)
def test_every_status_capture_parses(path):
    result = parse_nvlink_status(path.read_text())
    assert result.gpus


def test_h100_18_links_healthy_float_speed(read):
    (gpu,) = parse_nvlink_status(read("nvlink_s/h100-hbm3-18links-healthy.txt")).gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert len(gpu.links) == 18 and gpu.inactive_links == ()
    assert {link.speed_gbytes_s for link in gpu.links} == {26.562}


def test_h100_pcie_bridge_exactly_six_inactive_per_gpu(read):
    result = parse_nvlink_status(read("nvlink_s/h100-pcie-2gpu-nvlink-bridge-12of18-active.txt"))
    assert [g.index for g in result.gpus] == [0, 1]
    for gpu in result.gpus:
        assert gpu.inactive_links == (4, 5, 10, 11, 16, 17)
        assert len(gpu.active_links) == 12


def test_v100_inactive_links_and_no_trailing_newline(read):
    text = read("nvlink_s/v100-sxm2-7gpus-listed-6links-inactive.txt")
    assert not text.endswith("\n")
    result = parse_nvlink_status(text)
    assert [g.index for g in result.gpus] == list(range(7))
    inactive = {g.index: g.inactive_links for g in result.gpus if g.inactive_links}
    assert inactive == {3: (3, 5), 4: (1,), 5: (0, 4), 6: (1,)}
    assert result.gpu(0).links[0].speed_gbytes_s == 25.781


def test_a100_integer_speed_tab_indented(read):
    (gpu,) = parse_nvlink_status(read("nvlink_s/a100-sxm4-80gb-gpu7-12links-healthy.txt")).gpus
    assert gpu.index == 7 and len(gpu.links) == 12
    assert all(link.active and link.speed_gbytes_s == 25.0 for link in gpu.links)


def test_a100_8gpu_status(read):
    result = parse_nvlink_status(read("nvlink_s/a100-sxm4-80gb-8gpu-nvlink-status-healthy.txt"))
    assert len(result.gpus) == 8
    assert all(len(g.links) == 12 and not g.inactive_links for g in result.gpus)
    assert result.gpu(0).uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"


def test_all_links_inactive_message_is_a_fact(read):
    (gpu,) = parse_nvlink_status(read("nvlink_s/a100-sxm4-80gb-gpu6-all-links-inactive.txt")).gpus
    assert gpu.index == 6 and gpu.all_links_inactive
    assert gpu.links == () and not gpu.mig_mode_unsupported


def test_mig_mode_not_supported(read):
    (gpu,) = parse_nvlink_status(read("nvlink_s/h100-mig-mode-not-supported.txt")).gpus
    assert gpu.mig_mode_unsupported and not gpu.all_links_inactive and gpu.links == ()


def test_error_counters_elided(read):
    result = parse_nvlink_errors(read("nvlink_e/h100-hbm3-gpu0-all-zero-errors-elided.txt"))
    (gpu,) = result.gpus
    assert result.elided
    assert sorted(gpu.counters) == [0, 1, 17]
    assert gpu.counters[17] == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    assert gpu.total("crc_errors") == 0


@pytest.mark.parametrize("text", ["", "   \n", "hello world\n", "Link 0: 25 GB/s\n"])
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_nvlink_status(text)
    with pytest.raises(ParseError):
        parse_nvlink_errors(text)


def test_unreadable_link_state_raises():
    with pytest.raises(ParseError):
        parse_nvlink_status("GPU 0: X (UUID: GPU-1)\n Link 0: banana\n")


# nvidia-smi prints this line in place of the block of a GPU it cannot open (fallen off the
# bus, Xid 79); the emulator's lost GPU prints it the same way.
LOST = "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error"


def test_lost_gpu_line_is_recorded_not_given_to_its_neighbour():
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n"
        "\t Link 0: 26.562 GB/s\n"
        f"{LOST}\n"
        "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-c)\n"
        "\t Link 0: 26.562 GB/s\n"
    )
    status = parse_nvlink_status(text)
    assert status.lost == ("0000:2A:00.0",)
    assert [g.index for g in status.gpus] == [0, 2] and status.gpus[0].messages == ()
    assert parse_nvlink_errors(f"{LOST}\n").lost == ("0000:2A:00.0",)
