"""A fault seen is a fault: where the readable part of incomplete evidence shows a fault, the
rule FAILs naming it (and what was not read); where it shows none, the rule is ERROR, never
PASS. Real captures (captures/SOURCES.md, SOURCES-extra.md), handed in beside the node's own
count of its GPUs (the `Attached GPUs` header of its -q)."""

from __future__ import annotations

from pathlib import Path

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.profiles import load_profile

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURES = FIXTURES / "captures"
V100 = load_profile(
    str(FIXTURES / "bundles/real-nvlink/v100-6-links-inactive/v100-sxm2-6links.yaml")
)
A100 = load_profile("a100-sxm4-8gpu")


def _judge(files: dict[str, str], profile: dict, rule: str):
    ev = {name: ProbeOutput(text, "", 0) for name, text in files.items()}
    (f,) = rules.evaluate(ev, rules.NodeContext("n", profile), only=[rule])
    return f


def _q_header(attached: int) -> str:
    """The node's own count of its GPUs, as the -q header of a run that printed no GPU yet
    states it (read by gpu_inventory only)."""
    return f"==============NVSMI LOG==============\n\nAttached GPUs : {attached}\n"


def test_links_down_in_a_listing_short_of_the_nodes_gpus_fail():
    """The V100 node lists 7 of its 8 GPUs, 6 links inactive among them: FAIL naming them."""
    text = (CAPTURES / "nvlink_s/v100-sxm2-7gpus-listed-6links-inactive.txt").read_text()
    f = _judge(
        {"nvidia-smi_nvlink_-s.txt": text, "nvidia-smi_-q.txt": _q_header(8)}, V100, "NVL-001"
    )
    assert f.status == "FAIL", f
    assert "GPU 3: link(s) 3,5 inactive" in f.reason
    assert "the rest not read: nvidia-smi_nvlink_-s.txt lists 7 of the node's 8 GPUs" in f.reason


def test_a_healthy_listing_short_of_the_nodes_gpus_is_error_never_pass():
    text = (CAPTURES / "nvlink_s/a100-sxm4-80gb-8gpu-nvlink-status-healthy.txt").read_text()
    cut = text[: text.index("GPU 5:")]  # five of the eight GPUs, each whole
    f = _judge(
        {"nvidia-smi_nvlink_-s.txt": cut, "nvidia-smi_-q.txt": _q_header(8)}, A100, "NVL-001"
    )
    assert f.status == "ERROR" and "lists 5 of the node's 8 GPUs" in f.reason, f


L40S = load_profile("l40s-pcie-4gpu")


def test_a_copy_below_band_on_the_gpus_measured_fails():
    """nvbandwidth measured one GPU of the node's four, at 12.4 GB/s on a Gen4 x16 link."""
    text = (CAPTURES / "nvbandwidth/1gpu-json-j-all-tests-pcie-12GBps.json").read_text()
    f = _judge({"nvbandwidth_-j.json": text, "nvidia-smi_-q.txt": _q_header(4)}, L40S, "BW-001")
    assert f.status == "FAIL", f
    assert "nvbandwidth_h2d 12.4 GB/s" in f.reason
    assert "the rest not read: host_to_device_memcpy_ce measured 1 of the node's 4 GPUs" in f.reason


def test_copies_within_band_on_some_gpus_are_error_never_pass():
    text = (CAPTURES / "nvbandwidth_text/a10-1gpu-v0.5-t-h2d-ce-text-25GBps.txt").read_text()
    files = {"nvbandwidth_-t_host_to_device_memcpy_ce.txt": text, "nvidia-smi_-q.txt": _q_header(4)}
    f = _judge(files, L40S, "BW-001")
    assert f.status == "ERROR" and "measured 1 of the node's 4 GPUs" in f.reason, f
