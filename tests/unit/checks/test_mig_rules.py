"""MIG-001 (MIG mode and GPU instances as the host's ``nvidia_mig_layout``) on real
``nvidia-smi mig -lgi`` captures, and the probes a MIG layout collects or keeps from running
(the emulated node's side is in test_rules_emulator.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import MIG_LGI_FILE
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext
from gpuboot.collect import state_probes
from gpuboot.probes import node_probes
from gpuboot.profiles import load_profile

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captures"
QUERY = "nvidia-smi_--query-gpu_--format=csv.csv"
# real --query-gpu captures of one GPU: index 0 with MIG mode Enabled / Disabled
MIG_ON = "nvidia_smi_query_csv/h200-mig-idle-fullfields.csv.txt"
MIG_OFF = "nvidia_smi_query_csv/h200-under-load-fullfields.csv.txt"
FOUR_GIS = "mig_lgi/a100-40gb-4-gpu-instances.txt"  # GPU 0: 1g.5gb x2, 2g.10gb, 3g.20gb
TWO_3G = "mig_lgi/a100-sxm4-40gb-2x-3g.20gb.txt"  # GPU 0: 3g.20gb x2
NO_MIG = ProbeOutput("No MIG-enabled devices found.\n", "", 6)


def _real(csv: str, lgi: str | ProbeOutput | None) -> dict[str, ProbeOutput]:
    """Evidence of a real --query-gpu capture and a real (or given) -lgi output."""
    ev = {QUERY: ProbeOutput((CAPTURES / csv).read_text(), "", 0)}
    if isinstance(lgi, str):
        lgi = ProbeOutput((CAPTURES / lgi).read_text(), "", 0)
    if lgi is not None:
        ev[MIG_LGI_FILE] = lgi
    return ev


def _mig001(evidence, layout, profile="a100-sxm4-8gpu", **hostvars):
    if layout is not None:
        hostvars["nvidia_mig_layout"] = layout
    c = NodeContext("n1", load_profile(profile), hostvars)
    (finding,) = rules.evaluate(evidence, c, only=["MIG-001"])
    return finding


# ------------------------------------------------------------------------ real captures
def test_layout_matching_the_capture_passes_in_any_order():
    f = _mig001(_real(MIG_ON, FOUR_GIS), [["3g.20gb", "1g.5gb", "2g.10gb", "1g.5gb"]])
    assert (f.status, f.applicable) == ("PASS", True)


def test_missing_instance_fails_naming_the_gpu():
    f = _mig001(_real(MIG_ON, FOUR_GIS), [["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb", "1g.5gb"]])
    assert f.status == "FAIL"
    assert f.reason == (
        "GPU 0: instances 1g.5gb, 1g.5gb, 2g.10gb, 3g.20gb, "
        "want 1g.5gb, 1g.5gb, 1g.5gb, 2g.10gb, 3g.20gb"
    )
    assert "gpuboot install" in f.action and "gpuboot-mig.service" in f.action


def test_wrong_profile_fails_naming_the_gpu():
    f = _mig001(_real(MIG_ON, TWO_3G), [["3g.20gb", "4g.20gb"]])
    assert f.status == "FAIL"
    assert f.reason == "GPU 0: instances 3g.20gb, 3g.20gb, want 3g.20gb, 4g.20gb"


def test_mig_on_where_the_layout_wants_it_off_fails():
    f = _mig001(_real(MIG_ON, TWO_3G), [[]])
    assert (f.status, f.reason) == ("FAIL", "GPU 0: MIG mode Enabled, want Disabled")


def test_no_mig_enabled_device_is_a_fact_not_an_error():
    assert _mig001(_real(MIG_OFF, NO_MIG), [[]]).status == "PASS"
    f = _mig001(_real(MIG_OFF, NO_MIG), [["3g.40gb"]])
    assert (f.status, f.reason) == ("FAIL", "GPU 0: MIG mode Disabled, want Enabled")


def test_mig_on_without_instances_fails():
    lost = ProbeOutput("No GPU instances found: Not Found\n", "", 6)
    f = _mig001(_real(MIG_ON, lost), [["3g.20gb", "3g.20gb"]])
    assert (f.status, f.reason) == ("FAIL", "GPU 0: instances none, want 3g.20gb, 3g.20gb")


def test_gpu_missing_from_nvidia_smi_fails():
    f = _mig001(_real(MIG_ON, TWO_3G), [["3g.20gb", "3g.20gb"], []])
    assert (f.status, f.reason) == ("FAIL", "GPU 1: not listed by nvidia-smi")


def test_not_applicable_without_layout_or_on_a_sku_without_mig():
    f = _mig001({}, None)  # no evidence needed: nothing is judged
    assert (f.status, f.applicable) == ("SKIPPED", False)
    assert "nvidia_mig_layout unset" in f.reason
    f = _mig001({}, [["3g.40gb"]], profile="l40s-pcie-4gpu")
    assert (f.status, f.applicable) == ("SKIPPED", False)
    assert "hardware.mig.supported: false" in f.reason


@pytest.mark.parametrize(
    ("lgi", "why"),
    [
        (None, "not collected"),
        (ProbeOutput("", "sh: 1: nvidia-smi: not found\n", 127), "not installed"),
        (ProbeOutput("", "", 124), "timed out"),
        (ProbeOutput("Insufficient Permissions\n", "", 4), "exit 4: Insufficient Permissions"),
        (ProbeOutput("| GPU instances: |\n+---+\n", "", 0), "no rows could be read"),
    ],
    ids=["missing", "not-installed", "timeout", "refused", "garbled"],
)
def test_unreadable_lgi_is_error_never_pass(lgi, why):
    f = _mig001(_real(MIG_ON, lgi), [["3g.20gb", "3g.20gb"]])
    assert f.status == "ERROR" and why in f.reason, f.reason


def test_broken_nvidia_smi_is_error():
    ev = _real(MIG_ON, TWO_3G)
    ev[QUERY] = ProbeOutput("NVIDIA-SMI has failed because it couldn't communicate\n", "", 9)
    f = _mig001(ev, [["3g.20gb", "3g.20gb"]])
    assert f.status == "ERROR" and "exit 9" in f.reason


# -------------------------------------------------------- what a MIG layout collects/skips
H100 = load_profile("hgx-h100-sxm-8gpu")
STACK = {"cuda_toolkit_version": "12.4.1-1", "dcgm_version": "1:3.3.9"}
SPLIT = [["3g.40gb", "3g.40gb"]] + [[]] * 7
WHOLE = [["7g.80gb"]] * 2 + [[]] * 6


def _tools(layout) -> set[str]:
    hostvars = {**STACK} if layout is None else {**STACK, "nvidia_mig_layout": layout}
    return {p.command.split()[0] for p in node_probes(H100, hostvars, "quick")}


def test_node_probes_skip_cuda_probes_only_when_the_layout_enables_mig():
    assert _tools(None) == {"nvbandwidth", "all_reduce_perf", "dcgmi"}
    assert _tools([[]] * 8) == {"nvbandwidth", "all_reduce_perf", "dcgmi"}  # managed, all off
    assert _tools(SPLIT) == set()  # dcgmi refuses a split GPU
    assert _tools(WHOLE) == {"dcgmi"}  # one whole-GPU instance: dcgmi diag accepts it


def test_lgi_is_collected_only_for_a_host_with_a_layout():
    assert MIG_LGI_FILE not in {p.file for p in state_probes(H100, STACK)}
    probes = {p.file: p.command for p in state_probes(H100, {"nvidia_mig_layout": [[]] * 8})}
    assert probes[MIG_LGI_FILE] == "nvidia-smi mig -lgi"
