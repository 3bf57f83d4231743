"""Certification on a 6-node lab with the full stack, provisioned once and certified once:
a different fault is injected on each node at the same time, then ONE certify run is
judged per node. Each injected fault kind gives the rule that names it FAIL (or WARN) with
the rule's action, the healthy node PASSes with measurements, pair probes pin a bad NIC on
its node after a retry with a known-good partner, and a removed probe tool is ERROR, not
FAIL.

The stack beyond the driver (fabric manager, DOCA-OFED, DCGM) and the probe tools
(`gpuboot-probes`: nvbandwidth, all_reduce_perf) are installed with apt from the lab
repository, as an operator's packages would be.

Layout (pair probes run in a ring, so every faulty NIC has a healthy neighbour):
  node1 healthy | node2 nic-down | node3 thermal-throttle (GPU 0) + qos-drift (NIC)
  node4 nvlink-down (GPU 1) + pcie-downtrain (GPU 2) | node5 fabricmanager-fails
  node6 probe tool removed
Faults sharing a node touch different parts and are named by different rules.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from gpuboot import certify as certify_mod
from gpuboot.checks.rules import RULES_BY_ID

from .conftest import gpuboot, ssh

pytestmark = pytest.mark.lab
STACK_VARS = {
    "cuda_toolkit_version": "12.4.1-1",
    "dcgm_version": "1:3.3.9",
    "doca_ofed_enabled": True,
    "nvidia_fabricmanager_enabled": True,
}
PROVISION = """set -e
apt-get install -y -q nvidia-fabricmanager-550=550.54.15-1 datacenter-gpu-manager=1:3.3.9 \
  doca-ofed=2.9.1-018000 gpuboot-probes >/dev/null
systemctl enable --now nvidia-fabricmanager nvidia-dcgm >/dev/null 2>&1
modprobe mlx5_ib || true
for t in nvbandwidth all_reduce_perf; do test -x /usr/bin/$t; done
for i in $(grep -o '"netdev": "[^"]*"' /etc/gpuemu/profile.json | cut -d'"' -f4); do
  mlnx_qos -i "$i" --trust dscp --pfc 0,0,0,1,0,0,0,0 >/dev/null 2>&1 || true
  for f in /run/gpuemu/sys/class/net/"$i"/ecn/roce_np/enable/3 \
           /run/gpuemu/sys/class/net/"$i"/ecn/roce_rp/enable/3; do
    if [ -e "$f" ]; then echo 1 >"$f"; fi
  done
done
"""
NODES = [f"node{i}" for i in range(1, 7)]
HEALTHY = "node1"
TOOL_REMOVED = "node6"
# node -> (faults injected, {rule: expected status})
FAULTS = {
    "node2": ([["nic-down", "mlx5_0"]], {"NIC-001": "FAIL", "BW-005": "FAIL"}),
    "node3": (
        [["thermal-throttle", "0"], ["qos-drift", "mlx5_0"]],
        {"THR-001": "WARN", "NIC-002": "FAIL"},
    ),
    "node4": (
        [["nvlink-down", "1", "3"], ["pcie-downtrain", "2", "3", "8"]],
        {"NVL-001": "FAIL", "XID-001": "FAIL", "PCI-001": "FAIL", "BW-001": "FAIL"},
    ),
    "node5": ([["fabricmanager-fails"]], {"FAB-001": "FAIL"}),
}


def _parallel(fn, items):
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


@pytest.fixture(scope="module")
def lab6(make_lab, tmp_path_factory):
    lab = make_lab(nodes=len(NODES))
    gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0)
    for node, out in zip(NODES, _parallel(lambda n: ssh(lab, n, PROVISION), NODES), strict=True):
        assert out.returncode == 0, f"{node}: {out.stderr}"
    inv = yaml.safe_load(lab.inventory.read_text())
    inv["all"].setdefault("vars", {}).update(STACK_VARS)
    path = tmp_path_factory.mktemp("inv") / "stack.yml"
    path.write_text(yaml.safe_dump(inv))
    lab.stack_inventory = path  # type: ignore[attr-defined]
    return lab


@pytest.fixture(scope="module")
def nodes(lab6):
    """Every fault on its own node at once, then one certify run over the whole lab."""

    def inject(node):
        for fault in FAULTS[node][0]:
            gpuboot("lab", "fault", "--name", lab6.name, node, *fault, check_rc=0)
            if fault[0] == "fabricmanager-fails":
                ssh(lab6, node, "systemctl restart nvidia-fabricmanager || true")

    _parallel(inject, list(FAULTS))
    out = ssh(lab6, TOOL_REMOVED, "rm -f /usr/bin/nvbandwidth && ! command -v nvbandwidth")
    assert out.returncode == 0, out.stderr
    report = certify_mod.certify(str(lab6.stack_inventory), probes="quick").to_dict()
    return {n["host"]: n for n in report["nodes"]}


def bad(node):
    return {
        f["rule"]: f["status"] for f in node["findings"] if f["status"] not in ("PASS", "SKIPPED")
    }


def finding(node, rule):
    return next(f for f in node["findings"] if f["rule"] == rule)


def test_every_node_was_judged(nodes):
    assert sorted(nodes) == NODES


def test_healthy_node_passes_with_measurements(nodes):
    assert nodes[HEALTHY]["verdict"] == "PASS"
    assert bad(nodes[HEALTHY]) == {}
    names = {m["name"] for m in nodes[HEALTHY]["measurements"]}
    assert {"nvbandwidth_h2d", "all_reduce_busbw", "ib_write_bw", "tcp_bw"} <= names


@pytest.mark.parametrize("node", list(FAULTS))
def test_fault_names_its_rule_with_its_action(nodes, node):
    faults, rules = FAULTS[node]
    got = bad(nodes[node])
    dump = json.dumps(nodes[node]["findings"], indent=1)
    for rule, status in rules.items():
        assert got.get(rule) == status, f"{faults}: {rule}\n{dump}"
        action = finding(nodes[node], rule)["action"]
        if rule == "XID-001":  # the Xid catalogue decides the action
            assert action.startswith("Xid 74:"), action
        else:
            assert action == RULES_BY_ID[rule].action, f"{rule}: {action}"
    assert nodes[node]["verdict"] == "FAIL"


def test_faults_spare_their_partners(nodes):
    """The nic-down node's ring neighbours (node1, node3) are not blamed for its NIC: the
    pair probe pinned the fault on node2 after a retry with a known-good partner."""
    for node in ("node1", "node3"):
        assert "BW-005" not in bad(nodes[node]), json.dumps(nodes[node]["findings"], indent=1)
    assert "NIC-001" not in bad(nodes["node3"])


def test_removed_probe_tool_is_error_not_fail(nodes):
    node = nodes[TOOL_REMOVED]
    assert node["verdict"] == "ERROR"
    assert set(bad(node)) == {"BW-001", "BW-002", "BW-003"}
    assert set(bad(node).values()) == {"ERROR"}
    for rule in ("BW-001", "BW-002", "BW-003"):
        f = finding(node, rule)
        assert f["reason"].startswith("cannot judge"), f
        assert f["action"].startswith("fix the harness"), f  # not a hardware action


def test_full_probes_measure_every_rail_and_pin_a_slow_one(nodes, lab6):
    """At the full level ib_write_bw runs rail by rail: one rail of the healthy node moving
    a third of its bandwidth fails BW-005 there, by rail, while its ring partner on that
    rail (node6) is cleared by the retry with a known-good node (node5, whose NICs are
    sound). Three nodes of the ring are enough, and take half the time of six."""
    fault = ["low-bandwidth", "ib_write_bw", "0.3", "mlx5_3"]
    gpuboot("lab", "fault", "--name", lab6.name, HEALTHY, *fault, check_rc=0)
    limit = f"{HEALTHY},node5,{TOOL_REMOVED}"
    report = certify_mod.certify(str(lab6.stack_inventory), probes="full", limit=limit).to_dict()
    got = {n["host"]: n for n in report["nodes"]}
    slow = finding(got[HEALTHY], "BW-005")
    assert slow["status"] == "FAIL" and slow["reason"].startswith("mlx5_3: "), slow
    spared = finding(got[TOOL_REMOVED], "BW-005")
    assert spared["status"] == "PASS" and "slowest of 8 rails" in spared["reason"], spared


def test_a_pair_probe_that_never_returns_is_error_and_the_others_are_judged(lab6, tmp_path):
    """node6's ib_write_bw never returns, deaf to the node's own `timeout` (a tool stuck in
    the kernel): past its pair-probe deadline (10 s here) the controller ends its ssh and
    node6 is ERROR for the pair phase, naming the deadline, while its partners are measured
    with each other and judged. Runs last: the hung tool is ended with the fault."""
    gpuboot(
        "lab", "fault", "--name", lab6.name, TOOL_REMOVED, "probe-hang", "ib_write_bw", check_rc=0
    )
    inv = yaml.safe_load(lab6.stack_inventory.read_text())
    inv["all"]["children"]["gpu_nodes"]["hosts"][TOOL_REMOVED]["gpuboot_pair_timeout"] = 10
    path = tmp_path / "deadline.yml"
    path.write_text(yaml.safe_dump(inv))
    limit = f"{HEALTHY},node5,{TOOL_REMOVED}"
    started = time.monotonic()
    try:
        report = certify_mod.certify(str(path), probes="quick", limit=limit).to_dict()
    finally:
        gpuboot("lab", "clear", "--name", lab6.name, TOOL_REMOVED, "probe-hang", check_rc=0)
        ssh(lab6, TOOL_REMOVED, "for p in $(pgrep -x ib_write_bw); do kill -KILL $p; done")
    # a partner's server waits out its own `timeout 60` for the client that never came
    assert time.monotonic() - started < 300
    got = {n["host"]: n for n in report["nodes"]}
    assert sorted(got) == [HEALTHY, "node5", TOOL_REMOVED]
    hung = finding(got[TOOL_REMOVED], "BW-005")
    assert hung["status"] in ("ERROR", "SKIPPED"), hung  # never a hardware verdict
    assert "pair probe timed out after 10s" in hung["reason"], hung
    for node in (HEALTHY, "node5"):
        ib = finding(got[node], "BW-005")
        assert ib["status"] in ("PASS", "WARN"), ib
        assert finding(got[node], "BW-006")["status"] == "PASS"
