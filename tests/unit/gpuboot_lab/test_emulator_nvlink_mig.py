"""NVLink, topology, MIG and the XML report of the emulator's nvidia-smi."""

from __future__ import annotations

import json
import re

import pytest

from gpuboot.evidence import (
    parse_mig_lci,
    parse_mig_lgi,
    parse_mig_lgip,
    parse_nvidia_smi_q,
    parse_nvidia_smi_q_xml,
    parse_nvlink_errors,
    parse_nvlink_status,
    parse_topo_matrix,
)
from tests.paths import REPO
from tests.unit.gpuboot_lab._emu import EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

CAPTURES = REPO / "tests" / "fixtures" / "captures"


@pytest.fixture
def node(tmp_path) -> EmuNode:
    return make_node(tmp_path)


def test_nvlink_status_healthy_h100(node):
    out = node.run("nvidia-smi", "nvlink", "-s", "-i", "0", check=True).out
    lines = out.splitlines()
    assert re.fullmatch(r"GPU 0: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f-]{36}\)", lines[0])
    assert lines[1:] == [f"\t Link {i}: 26.562 GB/s" for i in range(18)]


def test_nvlink_status_a100_prints_integer_speed(tmp_path):
    node = make_node(tmp_path, "a100-sxm4-8gpu")
    lines = node.run("nvidia-smi", "nvlink", "--status", check=True).out.splitlines()
    assert len(lines) == 8 * 13 and lines[1] == "\t Link 0: 25 GB/s"
    assert parse_nvlink_status("\n".join(lines)).gpus[7].links[11].speed_gbytes_s == 25


def test_nvlink_down_one_link_and_all_links(node):
    node.run("ctl", "fault", "add", "nvlink-down", "1", "4", check=True)
    node.run("ctl", "fault", "add", "nvlink-down", "6", check=True)
    out = node.run("nvidia-smi", "nvlink", "-s", check=True).out
    status = parse_nvlink_status(out)
    assert [ln.link for ln in status.gpus[1].links if not ln.active] == [4]
    assert "NVML: Unable to retrieve NVLink information as all links are inactive" in out
    errors = parse_nvlink_errors(node.run("nvidia-smi", "nvlink", "-e", "-i", "1").out)
    assert errors.gpus[0].counters[4]["crc_errors"] > 0
    assert errors.gpus[0].counters[3] == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    assert "74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 4(" in (
        node.run("dmesg").out
    )


def test_nvlink_pcie_only_board(tmp_path):
    node = make_node(tmp_path, "l40s-pcie-4gpu")
    lines = node.run("nvidia-smi", "nvlink", "-s", check=True).out.splitlines()
    assert len(lines) == 4 and all(x.startswith("GPU ") for x in lines)


def test_topo_matrix(node):
    node.run("ctl", "fault", "add", "nvlink-down", "2", "0", check=True)
    out = node.run("nvidia-smi", "topo", "-m", check=True).out
    lines = out.splitlines()
    assert lines[0].startswith("\tGPU0\tGPU1") and lines[0].endswith(
        "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    )
    assert lines[1].startswith("GPU0\t X \tNV18\tNV17\t")
    assert lines[1].endswith("\t0-55,112-167\t0\t\tN/A")
    assert "NIC Legend:\n\n  NIC0: mlx5_0\n" in out
    topo = parse_topo_matrix(out)
    assert topo.rows["GPU4"].links["NIC4"] == "PIX"
    assert topo.rows["GPU0"].links["NIC4"] == "SYS"


def test_topo_pcie_only(tmp_path):
    node = make_node(tmp_path, "l40s-pcie-4gpu")
    topo = parse_topo_matrix(node.run("nvidia-smi", "topo", "-m", check=True).out)
    assert topo.rows["GPU0"].links["GPU1"] == "NODE"
    assert topo.rows["GPU0"].links["GPU2"] == "SYS"


def test_xml_report_parses_and_matches_text(node):
    node.run("ctl", "fault", "add", "remap-pending", "5", check=True)
    xml = node.run("nvidia-smi", "-q", "-x", check=True).out
    assert xml.startswith(
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM '
        '"nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
    )
    assert "\t\t\t<pci_device_id>233010DE</pci_device_id>\n" in xml
    x = parse_nvidia_smi_q_xml(xml)
    t = parse_nvidia_smi_q(node.run("nvidia-smi", "-q", check=True).out)
    assert x.attached_gpus == t.attached_gpus == 8
    for gx, gt in zip(x.gpus, t.gpus, strict=True):
        assert (gx.bus_id, gx.uuid, gx.pcie_gen_current) == (
            gt.bus_id,
            gt.uuid,
            gt.pcie_gen_current,
        )
        assert gx.remapped_rows == gt.remapped_rows
    assert x.gpus[5].remapped_rows.pending is True


def test_mig_enable_is_pending_until_reset(node):
    res = node.run("nvidia-smi", "-i", "0", "-mig", "1", check=True)
    assert res.out == (
        "Warning: MIG mode is in pending enable state for GPU 00000000:19:00.0:Not Supported\n"
        "Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU "
        "00000000:19:00.0\nAll done.\n"
    )
    row = node.run(
        "nvidia-smi",
        "--query-gpu=mig.mode.current,mig.mode.pending",
        "--format=csv,noheader",
        "-i",
        "0",
        check=True,
    ).out
    assert row == "Disabled, Enabled\n"
    assert node.run("nvidia-smi", "mig", "-lgi").out == "No MIG-enabled devices found.\n"
    res = node.run("nvidia-smi", "-r", "-i", "0", check=True)
    assert res.out == "GPU 00000000:19:00.0 was successfully reset.\nAll done.\n"
    row = node.run(
        "nvidia-smi", "--query-gpu=mig.mode.current", "--format=csv,noheader", "-i", "0", check=True
    ).out
    assert row == "Enabled\n"


def test_mig_mode_survives_reboot_instances_do_not(node):
    node.run("nvidia-smi", "-i", "0", "-mig", "1", check=True)
    node.run("ctl", "boot", "--force", check=True)  # a reboot applies pending MIG mode
    node.run("nvidia-smi", "mig", "-cgi", "9,9", "-C", "-i", "0", check=True)
    assert len(parse_mig_lgi(node.run("nvidia-smi", "mig", "-lgi").out).items) == 2
    node.run("ctl", "boot", "--force", check=True)
    assert node.status()["gpus"][0]["mig"]["current"] is True
    res = node.run("nvidia-smi", "mig", "-lgi")
    assert (res.rc, res.out) == (6, "No GPU instances found: Not Found\n")


def test_mig_create_list_destroy(node):
    node.run("nvidia-smi", "-i", "0", "-mig", "1", check=True)
    node.run("nvidia-smi", "-r", "-i", "0", check=True)
    res = node.run("nvidia-smi", "mig", "-cgi", "3g.40gb,19,19", "-C", check=True)
    assert res.out.splitlines()[0] == (
        "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.40gb (ID  9)"
    )
    assert res.out.splitlines()[1] == (
        "Successfully created compute instance ID  0 on GPU  0 "
        "GPU instance ID  1 using profile MIG 3g.40gb (ID  2)"
    )
    gis = parse_mig_lgi(node.run("nvidia-smi", "mig", "-lgi", check=True).out).items
    assert sorted((g.profile_id, g.placement_start, g.placement_size) for g in gis) == [
        (9, 4, 4),
        (19, 0, 1),
        (19, 1, 1),
    ]
    cis = parse_mig_lci(node.run("nvidia-smi", "mig", "-lci", check=True).out).items
    assert len(cis) == 3
    lgip = parse_mig_lgip(node.run("nvidia-smi", "mig", "-lgip", check=True).out).items
    free = {p.name: p.instances_free for p in lgip}
    assert free["7g.80gb"] == 0 and free["1g.10gb"] == 2 and free["3g.40gb"] == 0
    listing = node.run("nvidia-smi", "-L", check=True).out
    assert re.search(r"^  MIG 3g\.40gb     Device  0: \(UUID: MIG-[0-9a-f-]{36}\)$", listing, re.M)
    q = parse_nvidia_smi_q(node.run("nvidia-smi", "-q", "-i", "0", check=True).out)
    assert len(q.gpus[0].mig_devices) == 3
    assert (
        "Nvlink queries are not supported for Devices in MIG mode"
        in node.run("nvidia-smi", "nvlink", "-s", "-i", "0").out
    )
    res = node.run("nvidia-smi", "mig", "-dgi")
    assert res.rc != 0 and "In use by another client" in res.out
    node.run("nvidia-smi", "mig", "-dci", check=True)
    node.run("nvidia-smi", "mig", "-dgi", check=True)
    assert node.run("nvidia-smi", "mig", "-lgi").rc == 6


def test_mig_insufficient_resources(node):
    node.run("nvidia-smi", "-i", "0", "-mig", "1", check=True)
    node.run("nvidia-smi", "-r", "-i", "0", check=True)
    node.run("nvidia-smi", "mig", "-cgi", "0", check=True)
    res = node.run("nvidia-smi", "mig", "-cgi", "19")
    assert res.rc == 2 and "Insufficient Resources" in res.out


def test_lgip_layout_equals_capture(tmp_path):
    """An A100-40GB profile (as captured) renders byte-identical to the real -lgip table."""
    from gpuboot.profiles import load_profile

    prof = load_profile("a100-sxm4-8gpu")
    prof["hardware"]["mig"]["profiles"] = [
        {
            "id": 19,
            "name": "1g.5gb",
            "instances": 7,
            "memory_gib": 4.75,
            "sm": 14,
            "dec": 0,
            "enc": 0,
            "ce": 1,
            "jpeg": 0,
            "ofa": 0,
            "size": 1,
            "placements": [0, 1, 2, 3, 4, 5, 6],
        },
        {
            "id": 20,
            "name": "1g.5gb+me",
            "instances": 1,
            "memory_gib": 4.75,
            "sm": 14,
            "dec": 1,
            "enc": 0,
            "ce": 1,
            "jpeg": 1,
            "ofa": 1,
            "size": 1,
            "placements": [0, 1, 2, 3, 4, 5, 6],
        },
        {
            "id": 15,
            "name": "1g.10gb",
            "instances": 4,
            "memory_gib": 9.62,
            "sm": 14,
            "dec": 1,
            "enc": 0,
            "ce": 1,
            "jpeg": 0,
            "ofa": 0,
            "size": 2,
            "placements": [0, 2, 4, 6],
        },
        {
            "id": 14,
            "name": "2g.10gb",
            "instances": 3,
            "memory_gib": 9.62,
            "sm": 28,
            "dec": 1,
            "enc": 0,
            "ce": 2,
            "jpeg": 0,
            "ofa": 0,
            "size": 2,
            "placements": [0, 2, 4],
        },
        {
            "id": 9,
            "name": "3g.20gb",
            "instances": 2,
            "memory_gib": 19.50,
            "sm": 42,
            "dec": 2,
            "enc": 0,
            "ce": 3,
            "jpeg": 0,
            "ofa": 0,
            "size": 4,
            "placements": [0, 4],
        },
        {
            "id": 5,
            "name": "4g.20gb",
            "instances": 1,
            "memory_gib": 19.50,
            "sm": 56,
            "dec": 2,
            "enc": 0,
            "ce": 4,
            "jpeg": 0,
            "ofa": 0,
            "size": 4,
            "placements": [0],
        },
        {
            "id": 0,
            "name": "7g.40gb",
            "instances": 1,
            "memory_gib": 39.25,
            "sm": 98,
            "dec": 5,
            "enc": 0,
            "ce": 7,
            "jpeg": 1,
            "ofa": 1,
            "size": 8,
            "placements": [0],
        },
    ]
    node = make_node(tmp_path)
    (node.root / "etc/gpuemu/profile.json").write_text(json.dumps(prof))
    node.run("nvidia-smi", "-i", "0", "-mig", "1", check=True)
    node.run("nvidia-smi", "-r", "-i", "0", check=True)
    ours = node.run("nvidia-smi", "mig", "-lgip", "-i", "0", check=True).out
    assert ours == (CAPTURES / "mig_lgip/a100-sxm4-40gb-all-free.txt").read_text()
    node.run("nvidia-smi", "mig", "-cgi", "9,19,14,19", "-i", "0", check=True)
    ours = node.run("nvidia-smi", "mig", "-lgi", check=True).out
    real = (CAPTURES / "mig_lgi/a100-40gb-4-gpu-instances.txt").read_text()
    assert sorted(ours.splitlines()) == sorted(real.splitlines())


def test_mig_not_supported_on_l40s(tmp_path):
    node = make_node(tmp_path, "l40s-pcie-4gpu")
    res = node.run("nvidia-smi", "-i", "0", "-mig", "1")
    assert res.rc == 3 and "Not Supported" in res.out


def test_reset_carries_out_pending_row_remap(node):
    node.run("ctl", "fault", "add", "remap-pending", "3", "--survive-reboot", check=True)
    node.run("nvidia-smi", "-r", "-i", "3", check=True)
    out = node.run(
        "nvidia-smi",
        "--query-gpu=remapped_rows.pending",
        "--format=csv,noheader",
        "-i",
        "3",
        check=True,
    ).out
    assert out == "No\n"


def test_a_compute_process_shows_in_q_and_refuses_the_gpu_reset(node):
    node.run("ctl", "fault", "add", "gpu-process", "2", "/usr/bin/python", "9212", check=True)
    text = parse_nvidia_smi_q(node.run("nvidia-smi", "-q", check=True).out)
    xml = parse_nvidia_smi_q_xml(node.run("nvidia-smi", "-q", "-x", check=True).out)
    for report in (text, xml):
        busy = [(g.bus_id.upper(), p) for g in report.gpus for p in g.processes]
        assert [(bus, p.name, p.used_memory_mib) for bus, p in busy] == [
            ("00000000:4C:00.0", "/usr/bin/python", 9212)
        ]
    res = node.run("nvidia-smi", "-r", "-i", "2")
    assert res.rc == 255
    assert "GPU 00000000:4C:00.0: In use by another client" in res.out
    assert node.run("nvidia-smi", "-r", "-i", "3", check=True).rc == 0  # another GPU resets
    node.run("ctl", "fault", "clear", "gpu-process", check=True)
    assert node.run("nvidia-smi", "-r", "-i", "2", check=True).rc == 0
