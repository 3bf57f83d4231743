"""nvidia-smi and nvidia-persistenced of the emulator against the real tools' formats."""

from __future__ import annotations

import csv
import io
import os
import re
import signal
import time

import pytest

from tests.paths import REPO
from tests.unit.gpuboot_lab._emu import DRIVER, EmuNode, emulator_module, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

smi_fields = emulator_module("smi_fields")

CAPTURES = REPO / "tests" / "fixtures" / "captures"


@pytest.fixture
def node(tmp_path) -> EmuNode:
    return make_node(tmp_path)


def test_no_driver_loaded(tmp_path):
    node = make_node(tmp_path, driver=False)
    node.install_userspace("nvml", DRIVER)
    res = node.run("nvidia-smi")
    assert res.rc == 9
    assert res.out == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
        "driver. Make sure that the latest NVIDIA driver is installed and "
        "running.\n\n"
    )


def test_no_nvml_library(tmp_path):
    res = make_node(tmp_path, driver=False).run("nvidia-smi", "-L")
    assert res.rc == 12
    assert res.out.startswith("NVIDIA-SMI couldn't find libnvidia-ml.so library")


def test_userspace_upgrade_without_reload_is_a_mismatch(node):
    node.install_userspace("nvml", "550.90.07")
    res = node.run("nvidia-smi")
    assert res.rc == 18
    assert res.out == (
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 550.90.07\n"
    )


def test_driver_mismatch_fault(node):
    node.run("ctl", "fault", "add", "driver-mismatch", check=True)
    res = node.run("nvidia-smi", "-q")
    assert res.rc == 18 and f"NVML library version: {DRIVER}" in res.out
    stale = node.read("/run/gpuemu/sys/module/nvidia/version").strip()
    assert stale != DRIVER and stale.startswith("550.54.")
    proc_version = node.read("/run/gpuemu/proc/driver/nvidia/version")
    assert f"Kernel Module for x86_64  {stale}" in proc_version
    assert "NVRM: API mismatch: the client has the version" in node.run("dmesg").out
    node.run("ctl", "fault", "clear", "driver-mismatch", check=True)
    assert node.run("nvidia-smi", "-L").rc == 0
    assert node.read("/run/gpuemu/sys/module/nvidia/version") == DRIVER + "\n"


def test_list_gpus(node):
    out = node.run("nvidia-smi", "-L", check=True).out.splitlines()
    assert len(out) == 8
    assert re.fullmatch(
        r"GPU 0: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}"
        r"-[0-9a-f]{12}\)",
        out[0],
    )


def _csv(text: str) -> list[dict[str, str]]:
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    return [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]


FIELDS = (
    "index,name,uuid,serial,pci.bus_id,pci.device_id,driver_version,vbios_version,"
    "persistence_mode,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
    "pcie.link.width.max,memory.total,temperature.gpu,power.draw,power.limit,"
    "clocks_throttle_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown,"
    "ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
    "ecc.errors.uncorrected.aggregate.total,retired_pages.pending,remapped_rows.pending,"
    "remapped_rows.failure,mig.mode.current,mig.mode.pending"
)


def test_query_gpu_csv_values_and_headers(node):
    rows = _csv(node.run("nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv", check=True).out)
    assert len(rows) == 8
    r = rows[0]
    assert r["name"] == "NVIDIA H100 80GB HBM3"
    assert r["pci.bus_id"] == "00000000:19:00.0"
    assert r["pci.device_id"] == "0x233010DE"
    assert r["driver_version"] == DRIVER
    assert r["memory.total [MiB]"] == "81559 MiB"
    assert r["power.limit [W]"] == "700.00 W"
    assert (r["pcie.link.gen.current"], r["pcie.link.width.current"]) == ("5", "16")
    assert r["retired_pages.pending"] == "[N/A]"
    assert r["remapped_rows.pending"] == "No"
    assert r["mig.mode.current"] == "Disabled"
    assert [x["index"] for x in rows] == [str(i) for i in range(8)]


def test_query_gpu_header_names_match_the_real_capture(node):
    """Every field of the real 590-driver capture that we model gets the same header text."""
    text = (CAPTURES / "nvidia_smi_query_csv/h100-hbm3-idle-fullfields.csv.txt").read_text()
    header = next(csv.reader(io.StringIO(text), skipinitialspace=True))
    fields = [h.split(" [")[0] for h in header]
    ours = [f for f in fields if smi_fields.resolve(f)]
    assert len(ours) > 120
    out = node.run("nvidia-smi", "--query-gpu=" + ",".join(ours), "--format=csv", check=True).out
    want = [h for h in header if h.split(" [")[0] in ours]
    assert out.splitlines()[0].split(", ") == want


def test_query_gpu_noheader_nounits_and_selection(node):
    res = node.run(
        "nvidia-smi",
        "--query-gpu=index,memory.total,power.limit",
        "--format=csv,noheader,nounits",
        "-i",
        "3",
        check=True,
    )
    assert res.out == "3, 81559, 700.00\n"


def test_query_gpu_unknown_field(node):
    res = node.run("nvidia-smi", "--query-gpu=index,bogus.field", "--format=csv")
    assert res.rc == 2
    assert res.out.startswith('Field "bogus.field" is not a valid field to query.')


def test_xid79_gpu_falls_off_the_bus(node):
    node.run("ctl", "fault", "add", "xid", "79", "0", check=True)
    res = node.run("nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader")
    assert res.rc == 15
    lines = res.out.splitlines()
    assert lines[0] == "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error"
    assert lines[1:] == [
        f"{i}, {b}"
        for i, b in zip(
            range(1, 8), node.profile["hardware"]["gpu"]["pci_bus_ids"][1:], strict=True
        )
    ]
    node.run("ctl", "fault", "clear", check=True)
    assert node.run("nvidia-smi", "-L").rc == 0


def _skeleton(lines: list[str]) -> list[str]:
    return [re.sub(r"\s*:.*$", "", x).rstrip() for x in lines]


def test_q_report_has_the_535_layout(node):
    """Label/indent skeleton of one GPU block equals the real 535.161.08 H100 capture's."""
    real = (CAPTURES / "nvidia_smi_q/h100-hbm3-8gpu-q-535.161.08.txt").read_text().splitlines()
    start = real.index("GPU 00000000:19:00.0")
    end = real.index("GPU 00000000:3B:00.0") - 1
    ours = node.run("nvidia-smi", "-q", check=True).out.splitlines()
    o_start = ours.index("GPU 00000000:19:00.0")
    o_end = ours.index("GPU 00000000:3B:00.0") - 1
    assert _skeleton(ours[o_start:o_end]) == _skeleton(real[start:end])
    colon = [x.index(":") for x in ours[o_start:o_end] if " : " in x]
    assert set(colon) == {42}
    assert ours[:8][1] == "==============NVSMI LOG=============="
    assert f"Driver Version                            : {DRIVER}" in ours
    assert "CUDA Version                              : 12.4" in ours
    assert "Attached GPUs                             : 8" in ours


def test_faults_show_in_q_and_csv(node):
    for args in (
        ["pcie-downtrain", "1", "4", "8"],
        ["remap-pending", "2"],
        ["ecc-uncorrectable", "3"],
        ["thermal-throttle", "4"],
        ["remap-failed", "5"],
    ):
        node.run("ctl", "fault", "add", *args, check=True)
    rows = _csv(node.run("nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv", check=True).out)
    assert (rows[1]["pcie.link.gen.current"], rows[1]["pcie.link.width.current"]) == ("4", "8")
    assert rows[1]["pcie.link.gen.max"] == "5"
    assert rows[2]["remapped_rows.pending"] == "Yes"
    assert rows[3]["ecc.errors.uncorrected.volatile.total"] == "1"
    assert rows[3]["ecc.errors.uncorrected.aggregate.total"] == "1"
    assert rows[4]["clocks_throttle_reasons.hw_slowdown"] == "Active"
    assert int(rows[4]["temperature.gpu"]) >= 90
    assert rows[5]["remapped_rows.failure"] == "Yes"
    q = node.run("nvidia-smi", "-q", "-i", "2", check=True).out
    assert re.search(r"^        Pending {27}: Yes$", q, re.M)
    assert re.search(r"^        Reset Required {20}: Yes$", q, re.M)
    log = node.run("dmesg", check=True).out
    assert "limited by 16.0 GT/s PCIe x8 link" in log
    assert "63, pid='<unknown>', name=<unknown>, Row Remapper" in log
    assert "48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error" in log


def test_gpu_missing_renumbers(node):
    node.run("ctl", "fault", "add", "gpu-missing", "3", check=True)
    out = node.run(
        "nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader", check=True
    ).out.splitlines()
    assert len(out) == 7 and "00000000:5D:00.0" not in "".join(out)
    assert "Attached GPUs                             : 7" in node.run("nvidia-smi", "-q").out


def test_persistence_mode_messages(node):
    res = node.run("nvidia-smi", "-pm", "1", "-i", "0", check=True)
    assert res.out == "Enabled persistence mode for GPU 00000000:19:00.0.\nAll done.\n"
    res = node.run("nvidia-smi", "-pm", "ENABLED", "-i", "0", check=True)
    assert res.out == ("Persistence mode is already Enabled for GPU 00000000:19:00.0.\nAll done.\n")
    assert node.run("nvidia-smi", "-i", "9", "-pm", "1").rc == 6
    node.run("ctl", "boot", "--force", check=True)  # a reboot forgets legacy persistence mode
    assert node.status()["gpus"][0]["persistence"] is False


def test_persistenced_holds_persistence_until_stopped(node):
    proc = node.popen("nvidia-persistenced", "--foreground", "--user", "nvidia-persistenced")
    try:
        for _ in range(100):
            if node.status()["daemons"]["persistenced"]:
                break
            time.sleep(0.05)
        out = node.run(
            "nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader", check=True
        ).out
        assert out == "Enabled\n" * 8
        assert node.run("rmmod", "nvidia_uvm").rc == 0
        node.run("rmmod", "nvidia_modeset", check=True)
        assert node.run("rmmod", "nvidia").err == "rmmod: ERROR: Module nvidia is in use\n"
        second = node.run("nvidia-persistenced")
        assert second.rc == 1 and "failed to initialize" in second.err
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0
    out = node.run("nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader").out
    assert out == "Disabled\n" * 8


def test_persistenced_without_driver_fails(tmp_path):
    node = make_node(tmp_path, driver=False)
    res = node.run("nvidia-persistenced")
    assert res.rc == 1
    assert "nvidia-persistenced failed to initialize. Check syslog for more details." in res.err


def test_summary_table(node):
    out = node.run("nvidia-smi", check=True).out.splitlines()
    assert out[2].startswith(f"| NVIDIA-SMI {DRIVER}") and "CUDA Version: 12.4" in out[2]
    assert all(len(x) == 89 for x in out[1:12])
    assert re.match(
        r"\|   0  NVIDIA H100 80GB HBM3 +Off  \| 00000000:19:00\.0 Off \| +0 \|", out[8]
    )


def test_l40s_has_no_mig_and_no_fabric(tmp_path):
    node = make_node(tmp_path, "l40s-pcie-4gpu")
    rows = _csv(
        node.run(
            "nvidia-smi",
            "--query-gpu=name,mig.mode.current,fabric.state",
            "--format=csv",
            check=True,
        ).out
    )
    assert rows == [{"name": "NVIDIA L40S", "mig.mode.current": "[N/A]", "fabric.state": "N/A"}] * 4


def test_q_display_filter(node):
    out = node.run("nvidia-smi", "-q", "-d", "ROW_REMAPPER", "-i", "1", check=True).out
    gpu_block = out.split("GPU 00000000:3B:00.0\n", 1)[1].splitlines()
    assert gpu_block[0] == "    Remapped Rows" and len(gpu_block) == 11
    res = node.run("nvidia-smi", "-q", "-d", "BOGUS")
    assert res.rc == 2 and '"BOGUS" is not a valid display type.' in res.out


def test_nvidia_ctk(node):
    node.install_userspace("nvidia-container-toolkit", "1.16.2")
    assert node.run("nvidia-ctk", "--version", check=True).out.startswith(
        "NVIDIA Container Toolkit CLI version 1.16.2\n"
    )
    node.run("nvidia-ctk", "runtime", "configure", "--runtime=containerd", check=True)
    assert "runtimes.nvidia" in node.read("/etc/containerd/config.toml")
    node.run("nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/nvidia.yaml", check=True)
    assert node.read("/etc/cdi/nvidia.yaml").startswith("cdiVersion: 0.5.0\nkind: nvidia.com/gpu")


def _wait_gone(pid: int) -> None:
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_persistenced_forks_like_the_real_daemon(node):
    res = node.run("nvidia-persistenced", "--verbose")
    assert res.rc == 0  # the parent returns once the daemon is ready (systemd Type=forking)
    pid = int(node.read("/run/nvidia-persistenced/nvidia-persistenced.pid"))
    try:
        assert node.status()["daemons"]["persistenced"] is True
        assert all(g["persistence"] for g in node.status()["gpus"])
    finally:
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid)
    assert not node.exists("/run/nvidia-persistenced/nvidia-persistenced.pid")
    assert not any(g["persistence"] for g in node.status()["gpus"])
