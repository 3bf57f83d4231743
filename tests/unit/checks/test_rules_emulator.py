"""Each rule on emulator-shaped output: a healthy emulated node passes every rule, and each
fault kind the lab can inject fails (or warns) the rule that names it - and only it."""

from __future__ import annotations

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import MIG_LGI_FILE
from gpuboot.checks import rules
from tests.unit.checks._emunode import Daemon, collect, ctx, dpkg_line, full_node, set_ecn

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def _judge(node, tmp_path, level="none", faults=(), drop=(), fm=True, **hostvars):
    for f in faults:
        node.run("ctl", "fault", "add", *f.split(), check=True)
    daemons = [("nv-hostengine", "hostengine", "-n"), ("nvidia-persistenced", "persistenced")]
    if fm:
        daemons.append(("nv-fabricmanager", "fabricmanager"))
    opened = [Daemon(node, tool, key, *(a or ("--foreground",))) for tool, key, *a in daemons]
    try:
        ev = collect(node, tmp_path, level, drop, **hostvars)
    finally:
        for d in opened:
            d.__exit__()
    ev["dpkg-query_-W.txt"] = ProbeOutput(dpkg_line(), "", 0)
    ev["reboot-required.txt"] = ProbeOutput("", "", 0)
    c = ctx(node, level, **hostvars)
    if level != "none":  # a single node in a run has no pair partner
        c.meta["pairs"] = {k: {"emu": {"status": "none", "reason": "single"}} for k in
                           ("ib_write_bw", "tcp_bw")}  # fmt: skip
    return {f.rule: f for f in rules.evaluate(ev, c)}


def _not_pass(found):
    """Rules judged other than PASS (a SKIPPED rule did not run: not judged)."""
    return {r: f.status for r, f in found.items() if f.status not in ("PASS", "SKIPPED")}


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
        ("nic-down mlx5_1", {"NIC-001": "FAIL", "NIC-004": "FAIL"}),  # a port down has no GID
        ("qos-drift mlx5_0", {"NIC-002": "FAIL"}),
        ("gpu-missing 3", {"GPU-001": "FAIL", "PCI-002": "FAIL"}),  # off the bus too
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
    # PCI-002 asks ibstat which ConnectX functions have an RDMA device: without it, ERROR
    assert got == {
        "BW-001": "ERROR",
        "BW-002": "ERROR",
        "BW-003": "ERROR",
        "NIC-001": "ERROR",
        "PCI-002": "ERROR",
    }
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


def test_a_process_on_a_gpu_makes_the_probes_error_not_fail(node, tmp_path):
    # a job left on GPU 2 would share the bandwidth: measuring then would blame the node
    found = _judge(node, tmp_path, "quick", faults=("gpu-process 2",))
    assert _not_pass(found) == {
        r: "ERROR" for r in ("BW-001", "BW-002", "BW-003", "BW-004", "DCG-001")
    }
    assert "compute processes on the GPUs" in found["BW-001"].reason


# MIG: GPUs 0 and 1 split as the host's nvidia_mig_layout wants, the others MIG off
LAYOUT = [["3g.40gb", "3g.40gb"], ["1g.10gb", "3g.40gb", "2g.20gb", "1g.10gb"]] + [[]] * 6


@pytest.fixture
def mig_node(node):
    node.run("nvidia-smi", "-i", "0,1", "-mig", "1", check=True)
    node.run("nvidia-smi", "-r", "-i", "0,1", check=True)  # the reset makes MIG mode current
    node.run("nvidia-smi", "mig", "-i", "0", "-cgi", "9,9", "-C", check=True)
    node.run("nvidia-smi", "mig", "-i", "1", "-cgi", "3g.40gb,2g.20gb,19,19", "-C", check=True)
    return node


def test_mig_layout_applied_passes_and_whole_gpu_probes_say_why_not_run(mig_node, tmp_path):
    ev = collect(mig_node, tmp_path, "quick", nvidia_mig_layout=LAYOUT)
    assert MIG_LGI_FILE in ev
    assert not [n for n in ev if n.startswith(("nvbandwidth", "all_reduce_perf", "dcgmi"))]
    found = _judge(mig_node, tmp_path, "quick", nvidia_mig_layout=LAYOUT)
    assert _not_pass(found) == {}
    assert found["MIG-001"].applicable and found["MIG-001"].reason == "ok"
    for rule in ("BW-001", "BW-002", "BW-003", "BW-004"):
        assert not found[rule].applicable
        assert "MIG enabled on GPU 0,1 by the host's layout" in found[rule].reason
    assert not found["DCG-001"].applicable and "dcgmi diag refuses" in found["DCG-001"].reason
    assert found["BW-005"].reason == "not applicable: single"  # pair probes unaffected


@pytest.mark.parametrize(
    ("command", "layout", "reason"),
    [
        pytest.param(  # as a reboot: every instance is gone
            "-r",
            LAYOUT,
            "GPU 0: instances none, want 3g.40gb, 3g.40gb; "
            "GPU 1: instances none, want 1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb",
            id="reset-loses-instances",
        ),
        pytest.param(  # GPU 0 wants another profile; GPU 3 asked for MIG, pending a reset
            "-i 3 -mig 1",
            [["3g.40gb", "4g.40gb"], LAYOUT[1], [], ["7g.80gb"]] + [[]] * 4,
            "GPU 0: instances 3g.40gb, 3g.40gb, want 3g.40gb, 4g.40gb; "
            "GPU 3: MIG mode Disabled, want Enabled",
            id="wrong-profile-and-mode",
        ),
        pytest.param(  # all current state matches; the next reboot would turn MIG on
            "-i 5 -mig 1",
            LAYOUT,
            "GPU 5: MIG mode Enabled pending (applied at the next GPU reset or reboot), "
            "want Disabled",
            id="pending-mode",
        ),
    ],
)
def test_mig_drift_fails_mig_001_naming_each_gpu(mig_node, tmp_path, command, layout, reason):
    mig_node.run("nvidia-smi", *command.split(), check=True)
    found = _judge(mig_node, tmp_path, nvidia_mig_layout=layout)
    assert _not_pass(found) == {"MIG-001": "FAIL"}
    assert found["MIG-001"].reason == reason


def test_no_mig_layout_leaves_mig_001_not_applicable(mig_node, tmp_path):
    found = _judge(mig_node, tmp_path)
    assert not found["MIG-001"].applicable and "nvidia_mig_layout unset" in found["MIG-001"].reason
