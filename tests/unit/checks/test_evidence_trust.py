"""Evidence the harness cannot trust - missing, empty, garbled, cut short, timed out, from a
probe that exited non-zero - is ERROR (a harness fault), never PASS and never FAIL.

The healthy node is the emulated HGX H100 (its collection run by gpuboot's real script,
as in test_rules_emulator.py) with the package probes of a real converged lab node
(tests/fixtures/captures/dpkg) and a real ib_write_bw capture; every rule passes on it.
Then one probe file at a time is corrupted, rule by rule through the RULES catalogue. The
exceptions, where a corruption is not an ERROR, are listed in EXCEPTIONS with the reason.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import MIG_LGI_FILE, PRECONDITIONS_FILE
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext, probes_matching
from gpuboot.checks.imex_rules import IMEX_ACTIVE
from gpuboot.profiles import load_profile
from tests.unit.checks._emunode import STACK_VARS, Daemon, collect, full_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captures"
QUERY = "nvidia-smi_--query-gpu_--format=csv.csv"
Q = "nvidia-smi_-q.txt"
NVLINK_S = "nvidia-smi_nvlink_-s.txt"
FM = "systemctl_is-active_nvidia-fabricmanager.txt"
NV_VERSION = "proc_driver_nvidia_version.txt"
# the packages a converged lab node holds (captures/dpkg/*.converged.txt), pinned as the
# stack's role variables pin them
PINS = {
    "nvidia_driver_packages": [
        "nvidia-utils-550=550.54.15-1",
        "nvidia-driver-550-open=550.54.15-1",
    ],
    "nvidia_fabricmanager_packages": ["nvidia-fabricmanager-550=550.54.15-1"],
    "cuda_toolkit_packages": ["cuda-toolkit-12-4=12.4.1-1"],
    "dcgm_packages": ["datacenter-gpu-manager=1:3.3.9"],
    "nvidia_mig_layout": [[]] * 8,  # MIG managed, off on every GPU: MIG-001 is judged
    "nvidia_imex_enabled": True,  # IMEX managed, running at the driver's version: IMX-001 judged
    # the real capture is a 200G rail; judge it against its own line rate
    "gpuboot_thresholds": {"ib_write_bw": {"expected": 197.0}},
}


def _capture(path: str, rc: int = 0) -> ProbeOutput:
    return ProbeOutput((CAPTURES / path).read_text(), "", rc)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("emu")
    node = full_node(tmp)
    daemons = [("nv-hostengine", "hostengine", "-n"), ("nvidia-persistenced", "persistenced"),
               ("nv-fabricmanager", "fabricmanager")]  # fmt: skip
    opened = [Daemon(node, tool, key, *(a or ("--foreground",))) for tool, key, *a in daemons]
    try:
        for _ in range(6):  # another test run on this machine may hold the probe lock a while
            ev = collect(node, tmp, "quick")
            if not ev[PRECONDITIONS_FILE].stdout.strip():
                break
            time.sleep(5)
    finally:
        for d in opened:
            d.__exit__()
    assert not ev[PRECONDITIONS_FILE].stdout.strip(), ev[PRECONDITIONS_FILE].stdout
    ev.update(
        {
            # the lab node's real list, with the IMEX package the lab repository serves
            "dpkg-query_-W.txt": ProbeOutput(
                _capture("dpkg/dpkg-query_-W.converged.txt").stdout
                + "nvidia-imex-550\t550.54.15-1\thi \n",
                "",
                0,
            ),
            # collected where IMEX is managed; the emulated node runs no systemd
            IMEX_ACTIVE: ProbeOutput("active\n", "", 0),
            "apt-mark_showhold.txt": _capture("dpkg/apt-mark_showhold.converged.txt"),
            "apt-config_dump_Unattended-Upgrade.txt": _capture(
                "dpkg/apt-config_dump_Unattended-Upgrade.converged.txt"
            ),
            "reboot-required.txt": ProbeOutput("", "", 0),
            MIG_LGI_FILE: ProbeOutput("No MIG-enabled devices found.\n", "", 6),
            "ib_write_bw_-d_mlx5_0_peer.txt": _capture(
                "ib_write_bw/h100-gdr-roce-200g-dmabuf-a-sweep-197gbps.txt"
            ),
            "tcp_bw_peer.txt": ProbeOutput(
                "gpuboot-tcpbw role=server bytes=11875000000 seconds=10.000 gbits_s=9.500\n", "", 0
            ),
        }
    )
    ctx = NodeContext("emu", node.profile, {**STACK_VARS, **PINS}, {"probes": "quick"})
    return ev, ctx


def _judge(evidence, ctx, rule_id=None):
    found = rules.evaluate(evidence, ctx, [rule_id] if rule_id else None)
    return {f.rule: f for f in found}


# Rules the emulated node is not configured for (no pod RDMA: gpuboot_rdma_cni none): not
# judged, and said so.
NOT_CONFIGURED = {r.id: "gpuboot_rdma_cni is none" for r in rules.RULES if r.id.startswith("RDM-")}


def test_healthy_node_passes_every_rule(healthy):
    """The baseline: without it, an ERROR below could be the node's, not the corruption's."""
    ev, ctx = healthy
    found = _judge(ev, ctx)
    judged = {r: f for r, f in found.items() if r not in NOT_CONFIGURED}
    assert {r: (f.status, f.reason) for r, f in judged.items() if f.status != "PASS"} == {}
    assert all(f.applicable for f in judged.values())  # every rule judged something
    for rule, why in NOT_CONFIGURED.items():
        assert found[rule].status == "SKIPPED" and why in found[rule].reason, found[rule]


# ------------------------------------------------------------------ rules x corruptions
GARBAGE = "\x1b[2J@@ garbled \x00\x00 output @@\nkey: value\n~~~~\n"


def _cut(text: str) -> str:
    return text[: int(len(text) * 0.4)]


CORRUPTIONS = {
    "empty": lambda o: ProbeOutput("", "", 0),
    "garbage": lambda o: ProbeOutput(GARBAGE, "", 0),
    "truncated": lambda o: ProbeOutput(_cut(o.stdout), "", 0),
    "timeout": lambda o: ProbeOutput(_cut(o.stdout), "", 124),
    "rc1": lambda o: ProbeOutput(o.stdout, "error: something failed\n", 1),
}

# what the ERROR says for a probe that did not complete: its own failure, not a parse error
REASONS = {"timeout": "timed out", "rc1": "exit 1: error: something failed"}

# (file pattern, corruption[, rule]) -> (status, why it is not ERROR), for every rule (or the
# one named) reading that file
EXCEPTIONS = {
    ("reboot-required.txt", "empty"): ("PASS", "no marker file is the healthy state"),
    ("reboot-required.txt", "truncated"): ("PASS", "the healthy file is empty: cut, still empty"),
    ("reboot-required.txt", "garbage"): (
        "FAIL",
        "any text is a /var/run/reboot-required* file: the marker's presence is the finding",
    ),
    ("dmesg.txt", "truncated"): (
        "PASS",
        "a line list with no count to check against: a cut log reads as a shorter one "
        "(a timeout, rc 124, is caught)",
    ),
    ("ethtool_-S_*", "truncated"): (
        "PASS",
        "NIC-005 records counters, it judges none: a cut list records fewer (a timeout, rc 124, "
        "and the collection's end marker are caught)",
    ),
    ("apt-mark_showhold.txt", "empty"): (
        "FAIL",
        "nothing held is a real state: the pins are loose",
    ),
    ("apt-mark_showhold.txt", "truncated"): (
        "FAIL",
        "a bare list of names: a cut list reads as fewer holds (a timeout, rc 124, is caught)",
    ),
    ("apt-config_dump_Unattended-Upgrade.txt", "empty"): (
        "FAIL",
        "apt-config prints nothing once the blacklist file is gone (captures/dpkg "
        "*.drifted.txt): a real state",
    ),
}


def _files(rule, evidence) -> list[str]:
    """One probe file per pattern the rule declares it reads (the first of a series)."""
    out = []
    for pattern in rule.evidence:
        names = list(probes_matching(evidence, pattern))
        out += names[:1]
    return out


def _expected(rule_id: str, name: str, corruption: str) -> tuple[str, str]:
    for (pattern, corr, *only), want in EXCEPTIONS.items():
        if corr == corruption and only in ([], [rule_id]) and fnmatch.fnmatchcase(name, pattern):
            return want
    return "ERROR", ""


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize("rule_id", [r.id for r in rules.RULES if r.id not in NOT_CONFIGURED])
def test_unreadable_evidence_is_error_never_pass_or_fail(healthy, rule_id, corruption):
    ev, ctx = healthy
    rule = rules.RULES_BY_ID[rule_id]
    files = _files(rule, ev)
    assert files, f"{rule_id}: the healthy node has none of {rule.evidence}"
    wrong = {}
    for name in files:
        bad = {**ev, name: CORRUPTIONS[corruption](ev[name])}
        got = _judge(bad, ctx, rule_id)[rule_id]
        want, _why = _expected(rule_id, name, corruption)
        said = REASONS.get(corruption, "") if want == "ERROR" else ""
        if got.status != want or said not in got.reason:
            wrong[name] = (got.status, got.reason)
    assert wrong == {}


def test_an_all_empty_bundle_is_error_not_fail(healthy):
    ev, ctx = healthy
    empty = {name: ProbeOutput("", "", 0) for name in ev}
    found = _judge(empty, ctx)
    statuses = {r: f.status for r, f in found.items() if r not in NOT_CONFIGURED}
    # STK-003: an empty apt-config dump is a node without the blacklist (see EXCEPTIONS)
    assert {r for r, s in statuses.items() if s != "ERROR"} == {"STK-003"}
    assert rules.verdict([f for r, f in found.items() if r != "STK-003"]) == "ERROR"
    assert "0 of 8 GPUs visible" not in found["GPU-001"].reason


# ------------------------------------------------------------------- the cases
def _until(text: str, marker: str, nth: int) -> str:
    """``text`` up to the ``nth`` occurrence of ``marker`` (at a line start)."""
    starts = [m.start() for m in re.finditer(rf"^{re.escape(marker)}", text, re.M)]
    return text[: starts[nth]]


@pytest.mark.parametrize("rc", [124, 0])
def test_nvlink_status_cut_after_gpu_0_is_error(healthy, rc):
    ev, ctx = healthy
    cut = _until(ev[NVLINK_S].stdout, "GPU 1:", 0)
    assert cut.count("Link ") == 18  # GPU 0 whole, all 18 links up
    found = _judge({**ev, NVLINK_S: ProbeOutput(cut, "", rc)}, ctx, "NVL-001")["NVL-001"]
    assert found.status == "ERROR"
    want = "timed out" if rc else "lists 1 of the node's 8 GPUs"
    assert want in found.reason, found.reason


def test_nvlink_status_cut_inside_the_last_gpu_is_error(healthy):
    ev, ctx = healthy
    cut = ev[NVLINK_S].stdout.rsplit("Link 9:", 1)[0]  # GPU 7 stops after link 8
    found = _judge({**ev, NVLINK_S: ProbeOutput(cut, "", 0)}, ctx, "NVL-001")["NVL-001"]
    assert (found.status, "GPU 7 link(s) 9,10" in found.reason) == ("ERROR", True), found.reason


Q_RULES = ("GPU-003", "PCI-001", "ECC-001", "ECC-002", "ECC-003", "THR-001")


def test_real_nvidia_smi_q_cut_to_1_of_8_gpus_is_error():
    """The real 8-GPU H100 capture, cut after its first GPU (a timeout, a size cap)."""
    text = (CAPTURES / "nvidia_smi_q/h100-hbm3-8gpu-q-535.161.08.txt").read_text()
    ctx = NodeContext("n1", load_profile("hgx-h100-sxm-8gpu"), {})
    whole = _judge({Q: ProbeOutput(text, "", 0)}, ctx)
    assert {r: whole[r].status for r in Q_RULES} == dict.fromkeys(Q_RULES, "PASS")
    cut = _until(text, "GPU 0000", 1)
    found = _judge({Q: ProbeOutput(cut, "", 0)}, ctx)
    assert {r: found[r].status for r in Q_RULES} == dict.fromkeys(Q_RULES, "ERROR")
    assert "nvidia-smi -q lists 1 of its 8 attached GPUs" in found["ECC-001"].reason
    timed_out = _judge({Q: ProbeOutput(cut, "", 124)}, ctx)
    assert all("timed out" in timed_out[r].reason for r in Q_RULES)


def test_nvidia_smi_q_cut_inside_the_last_gpu_is_error(healthy):
    ev, ctx = healthy
    cut = ev[Q].stdout.rsplit("    ECC Errors", 1)[0]  # GPU 7 stops before its ECC counters
    found = _judge({**ev, Q: ProbeOutput(cut, "", 0)}, ctx, "ECC-001")["ECC-001"]
    assert found.status == "ERROR" and "stops inside GPU" in found.reason, found.reason


def test_query_csv_short_of_the_attached_gpus_is_error_not_a_lost_gpu(healthy):
    ev, ctx = healthy
    rows = ev[QUERY].stdout.splitlines(keepends=True)
    found = _judge({**ev, QUERY: ProbeOutput("".join(rows[:4]), "", 0)}, ctx)
    for rule in ("GPU-001", "GPU-002", "PCI-001", "MIG-001"):
        assert found[rule].status == "ERROR", found[rule]
    assert "--query-gpu lists 3 GPU(s), nvidia-smi -q says Attached GPUs: 8" in (
        found["GPU-001"].reason
    )


def _drop_gpu(ev, index: int):
    """The node as it is when a GPU is gone from the bus entirely: every listing agrees."""
    out = dict(ev)
    rows = ev[QUERY].stdout.splitlines(keepends=True)
    out[QUERY] = ProbeOutput("".join(r for i, r in enumerate(rows) if i != index + 1), "", 0)
    blocks = re.split(r"(?m)^(?=GPU 0000)", ev[Q].stdout)
    head = blocks[0].replace("Attached GPUs                             : 8",
                             "Attached GPUs                             : 7")  # fmt: skip
    out[Q] = ProbeOutput(head + "".join(b for i, b in enumerate(blocks[1:]) if i != index), "", 0)
    links = re.split(r"(?m)^(?=GPU \d+:)", ev[NVLINK_S].stdout)
    out[NVLINK_S] = ProbeOutput("".join(b for i, b in enumerate(links) if i != index), "", 0)
    return out


def test_a_gpu_really_missing_stays_gpu_001_fail(healthy):
    ev, ctx = healthy
    found = _judge(_drop_gpu(ev, 3), ctx)
    assert found["GPU-001"].status == "FAIL"
    assert found["GPU-001"].reason == "7 of 8 GPUs visible"
    for rule in ("GPU-002", "GPU-003", "ECC-001", "THR-001", "NVL-001"):
        assert found[rule].status == "PASS", found[rule]  # the 7 the node has are complete


def test_a_gpu_nvidia_smi_lost_stays_gpu_001_fail_naming_it(healthy):
    ev, ctx = healthy
    rows = ev[QUERY].stdout.splitlines(keepends=True)
    lost = "Unable to determine the device handle for GPU0000:5D:00.0: Unknown Error\n"
    csv = "".join(rows[:4]) + lost + "".join(rows[5:])
    found = _judge({**ev, QUERY: ProbeOutput(csv, "", 15)}, ctx, "GPU-001")["GPU-001"]
    assert found.status == "FAIL"
    assert found.reason == "7 of 8 GPUs visible; GPU 0000:5D:00.0 lost: Unknown Error"


@pytest.mark.parametrize("rc", [None, "x", "0", False, 255])
def test_an_exit_code_missing_or_garbage_is_error(healthy, rc):
    ev, ctx = healthy
    found = _judge({**ev, "lsmod.txt": ProbeOutput(ev["lsmod.txt"].stdout, "", rc)}, ctx)
    assert found["MOD-001"].status == "ERROR"
    assert ("exit code not recorded" if rc != 255 else "exit 255") in found["MOD-001"].reason


# ------------------------------------------------- exit codes that are the tool's answer
def test_fabric_manager_inactive_exit_3_is_fab_001_fail(healthy):
    ev, ctx = healthy
    found = _judge({**ev, FM: ProbeOutput("inactive\n", "", 3)}, ctx, "FAB-001")["FAB-001"]
    assert (found.status, found.reason) == ("FAIL", "nvidia-fabricmanager service is inactive")


def test_no_nvidia_module_is_stk_001_fail(healthy):
    ev, ctx = healthy
    gone = ProbeOutput("", "cat: /proc/driver/nvidia/version: No such file or directory\n", 1)
    found = _judge({**ev, NV_VERSION: gone}, ctx, "STK-001")["STK-001"]
    assert found.status == "FAIL" and "no NVIDIA kernel module loaded" in found.reason


def test_wrong_all_reduce_results_exit_1_stay_bw_004_fail(healthy):
    ev, ctx = healthy
    name = next(iter(probes_matching(ev, "all_reduce_perf*")))
    text = ev[name].stdout.replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 3 FAILED"
    )
    text = re.sub(r"(?m)^(\s+8589934592\s.*\s)0(\s*)$", r"\g<1>3\2", text)  # #wrong column
    found = _judge({**ev, name: ProbeOutput(text, "", 1)}, ctx, "BW-004")["BW-004"]
    assert found.status == "FAIL" and "wrong element" in found.reason, found.reason


# ------------------------------------------------------------------------ NICs and rails
def test_real_ibstat_cut_inside_a_port_is_error_not_a_slow_nic():
    """The real 8x400G capture cut mid-line ("Rate: 400" read as "Rate: 4")."""
    text = (CAPTURES / "ibstat/h100-roce-8x400g-cx7-plus-4x100g-all-active.txt").read_text()
    ctx = NodeContext("n1", load_profile("hgx-h100-sxm-8gpu"), {"doca_ofed_enabled": True})
    assert _judge({"ibstat.txt": ProbeOutput(text, "", 0)}, ctx, "NIC-001")["NIC-001"].status == (
        "PASS"
    )
    last = text.rindex("Rate: 400") + len("Rate: 4")
    found = _judge({"ibstat.txt": ProbeOutput(text[:last], "", 0)}, ctx, "NIC-001")["NIC-001"]
    assert found.status == "ERROR" and "cut short" in found.reason, found.reason


@pytest.mark.parametrize(
    ("rule", "pattern"), [("NIC-002", "mlnx_qos_-i_*"), ("NIC-003", "sys_class_net_*_ecn*")]
)
def test_fewer_rails_than_the_profile_is_error(healthy, rule, pattern):
    ev, ctx = healthy
    dropped = next(iter(probes_matching(ev, pattern)))
    found = _judge({n: o for n, o in ev.items() if n != dropped}, ctx, rule)[rule]
    assert found.status == "ERROR" and dropped in found.reason, found.reason


def test_ecn_listing_short_of_a_switch_is_error_not_ecn_off(healthy):
    ev, ctx = healthy
    name = next(iter(probes_matching(ev, "sys_class_net_*_ecn_enable.txt")))
    kept = [ln for ln in ev[name].stdout.splitlines(keepends=True) if "roce_rp/enable/3" not in ln]
    found = _judge({**ev, name: ProbeOutput("".join(kept), "", 0)}, ctx, "NIC-003")["NIC-003"]
    assert found.status == "ERROR" and "15 of the port's 16" in found.reason, found.reason


def test_nvbandwidth_over_fewer_gpus_than_the_node_has_is_error(healthy):
    """A matrix with a column per GPU measured: 4 columns on an 8-GPU node judge half of it."""
    ev, ctx = healthy
    name = next(iter(probes_matching(ev, "nvbandwidth_*host_to_device*")))
    doc = json.loads(ev[name].stdout)
    for case in doc["nvbandwidth"]["testcases"]:
        case["bandwidth_matrix"] = [row[:4] for row in case["bandwidth_matrix"]]
    cut = ProbeOutput(json.dumps(doc), "", 0)
    found = _judge({**ev, name: cut}, ctx, "BW-001")["BW-001"]
    assert found.status == "ERROR", found.reason
    assert "host_to_device_memcpy_ce measured 4 of the node's 8 GPUs" in found.reason


def test_rules_a_lost_gpu_leaves_unable_to_judge_name_it_as_the_cause(healthy):
    """A GPU gone from the bus leaves topo -m a GPU short: TOP-001 cannot judge, and that
    is the lost GPU's doing, not the harness's (a scan says "still failing", not "could not
    judge")."""
    ev, ctx = healthy
    gone = _drop_gpu(ev, 3)
    topo = next(n for n in ev if n.startswith("nvidia-smi_topo_-m"))
    rows = ev[topo].stdout.splitlines(keepends=True)
    gone[topo] = ProbeOutput("".join(r for r in rows if not r.startswith("GPU3")), "", 0)
    alone = _judge({**ev, topo: gone[topo]}, ctx, "TOP-001")["TOP-001"]
    assert alone.status == "ERROR"  # without the root cause in view: the harness's ERROR
    found = _judge(gone, ctx)
    assert found["GPU-001"].status == "FAIL"
    top = found["TOP-001"]
    assert top.status == "SKIPPED"
    assert top.reason.startswith("not judged: GPU-001 failed (7 of 8 GPUs visible); ")
    assert top.reason.endswith(alone.reason)
    assert top.action.startswith("fix GPU-001, PCI-002 first")
    assert rules.verdict(list(found.values())) == "FAIL"


@pytest.mark.parametrize(
    ("need", "rule", "edit"),
    [
        ("pci", "PCI-001", ("Max                       : 5", "Max                       : 4")),
        ("ecc", "ECC-001", ("Current                           : Enabled",
                            "Current                           : Disabled")),
    ],
)  # fmt: skip
def test_a_q_contradicting_the_query_csv_is_error_naming_both(healthy, need, rule, edit):
    """Where --query-gpu and -q both carry a section, neither is trusted alone: a -q that
    says otherwise than the csv is ERROR naming both files, never the csv's PASS."""
    ev, ctx = healthy
    q = ev[Q].stdout
    assert edit[0] in q, f"the healthy -q has no {edit[0]!r}"
    found = _judge({**ev, Q: ProbeOutput(q.replace(edit[0], edit[1], 1), "", 0)}, ctx, rule)[rule]
    assert found.status == "ERROR" and "evidence disagrees" in found.reason
    assert QUERY in found.reason and Q in found.reason
