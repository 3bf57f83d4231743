"""Each rule on emulator-shaped output: a healthy emulated node passes every rule, and each
fault kind the lab can inject fails (or warns) the rule that names it - and only it."""

from __future__ import annotations

import pytest
from _emunode import Daemon, collect, ctx, dpkg_line, full_node, set_ecn

from gpuboot.checks import rules
from gpuboot.collect import ProbeOutput


def _judge(node, tmp_path, level="none", faults=(), drop=(), fm=True):
    for f in faults:
        node.run("ctl", "fault", "add", *f.split(), check=True)
    daemons = [("nv-hostengine", "hostengine", "-n"), ("nvidia-persistenced", "persistenced")]
    if fm:
        daemons.append(("nv-fabricmanager", "fabricmanager"))
    opened = [Daemon(node, tool, key, *(a or ("--foreground",))) for tool, key, *a in daemons]
    try:
        ev = collect(node, tmp_path, level, drop)
    finally:
        for d in opened:
            d.__exit__()
    ev["dpkg-query_-W.txt"] = ProbeOutput(dpkg_line(), "", 0)
    ev["reboot-required.txt"] = ProbeOutput("", "", 0)
    c = ctx(node, level)
    if level != "none":  # a single node in a run has no pair partner
        c.meta["pairs"] = {k: {"emu": {"status": "none", "reason": "single"}} for k in
                           ("ib_write_bw", "tcp_bw")}  # fmt: skip
    return {f.rule: f for f in rules.evaluate(ev, c)}


def _not_pass(found):
    return {r: f.status for r, f in found.items() if f.status != "PASS"}


@pytest.fixture
def node(tmp_path):
    return full_node(tmp_path)


def test_healthy_node_passes_every_rule_with_quick_probes(node, tmp_path):
    found = _judge(node, tmp_path, "quick")
    assert _not_pass(found) == {}
    assert found["BW-001"].measurements[0]["median_of"] == 3
    assert found["FAB-001"].applicable and not found["BW-005"].applicable


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("xid 79 2", {"XID-001": "FAIL", "GPU-001": "FAIL", "NVL-001": "FAIL", "NVL-002": "WARN"}),
        ("xid 13", {}),  # application fault: not hardware
        ("nvlink-down 1 3", {"XID-001": "FAIL", "NVL-001": "FAIL", "NVL-002": "WARN"}),
        ("pcie-downtrain 2 3 8", {"PCI-001": "FAIL"}),
        ("ecc-uncorrectable 1", {"XID-001": "FAIL", "ECC-001": "FAIL", "ECC-002": "FAIL"}),
        ("remap-pending 1", {"XID-001": "FAIL", "ECC-002": "FAIL"}),
        ("remap-failed 2", {"XID-001": "FAIL", "ECC-003": "FAIL"}),
        ("thermal-throttle 0", {"THR-001": "WARN"}),
        ("nic-down mlx5_1", {"NIC-001": "FAIL"}),
        ("qos-drift mlx5_0", {"NIC-002": "FAIL"}),
        ("gpu-missing 3", {"GPU-001": "FAIL"}),
        ("driver-mismatch 550.40.07", {"STK-001": "FAIL", "GPU-001": "FAIL", "GPU-002": "FAIL"}),
    ],
)
def test_each_fault_names_its_rule(node, tmp_path, fault, expected):
    found = _judge(node, tmp_path, faults=(fault,))
    got = _not_pass(found)
    for rule, status in expected.items():
        assert got.pop(rule) == status, found[rule]
    # what else is not PASS may only be ERROR (nvidia-smi itself broken by the fault)
    assert set(got.values()) <= {"ERROR"}, got
    if expected:
        assert next(iter(found[r] for r in expected)).action


def test_ecn_off_on_one_rail_fails_nic_003(node, tmp_path):
    set_ecn(node, "enp26s0np0", "0")
    found = _judge(node, tmp_path)
    assert _not_pass(found) == {"NIC-003": "FAIL"}
    assert found["NIC-003"].reason == "enp26s0np0 ECN off on roce_np 3, roce_rp 3"


def test_fabric_manager_not_running_fails_fab_001(node, tmp_path):
    found = _judge(node, tmp_path, fm=False)
    assert found["FAB-001"].status == "FAIL"
    assert "inactive" in found["FAB-001"].reason and "In Progress" in found["FAB-001"].reason


def test_bandwidth_faults_fail_their_figures(node, tmp_path):
    found = _judge(node, tmp_path, "quick", faults=("low-bandwidth all_reduce_perf 0.5",))
    assert _not_pass(found) == {"BW-004": "FAIL"}
    m = found["BW-004"].measurements[0]
    assert m["margin"] < 0 and m["status"] == "FAIL" and m["samples"]


def test_removed_tool_is_error_not_fail(node, tmp_path):
    found = _judge(node, tmp_path, "quick", drop=("nvbandwidth", "ibstat"))
    got = _not_pass(found)
    assert got == {"BW-001": "ERROR", "BW-002": "ERROR", "BW-003": "ERROR", "NIC-001": "ERROR"}
    assert "not installed" in found["BW-001"].reason
    assert rules.verdict(list(found.values())) == "ERROR"


def test_probe_lock_held_is_a_precondition_error(node, tmp_path):
    # another probe run holds the lock: nothing is measured, every probe rule is ERROR
    import fcntl
    import os

    from gpuboot.probes import LOCK

    path = LOCK if os.access(os.path.dirname(LOCK), os.W_OK) else "/tmp/gpuboot-probes.lock"
    lock = open(path, "w")  # noqa: SIM115
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        found = _judge(node, tmp_path, "quick")
    finally:
        lock.close()
    for rule in ("BW-001", "BW-004", "DCG-001"):
        assert found[rule].status == "ERROR"
        assert "pre-condition not met" in found[rule].reason
