"""Certification on a 3-node lab with the full stack: each injected fault kind gives the
rule that names it FAIL (or WARN), the healthy nodes PASS, pair probes pin a bad NIC on its
node after a retry with a known-good partner, and a removed probe tool is ERROR, not FAIL.

The stack beyond the driver (fabric manager, DOCA-OFED, DCGM) is installed here with apt
from the lab repository, and the two CUDA probe tools are linked to the emulator, standing
in for a probe package the lab catalogue does not have yet.
"""

from __future__ import annotations

import json

import pytest
import yaml

from gpuboot import certify as certify_mod

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
  doca-ofed=2.9.1-018000 >/dev/null
systemctl enable --now nvidia-fabricmanager nvidia-dcgm >/dev/null 2>&1
modprobe mlx5_ib || true
for t in nvbandwidth all_reduce_perf; do ln -sf /opt/gpuemu/gpuemu /usr/local/bin/$t; done
for i in $(grep -o '"netdev": "[^"]*"' /etc/gpuemu/profile.json | cut -d'"' -f4); do
  mlnx_qos -i "$i" --trust dscp --pfc 0,0,0,1,0,0,0,0 >/dev/null 2>&1 || true
done
"""


@pytest.fixture(scope="module")
def lab3(make_lab, tmp_path_factory):
    lab = make_lab(nodes=3)
    gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0)
    for node in ("node1", "node2", "node3"):
        out = ssh(lab, node, PROVISION)
        assert out.returncode == 0, out.stderr
    inv = yaml.safe_load(lab.inventory.read_text())
    inv["all"].setdefault("vars", {}).update(STACK_VARS)
    path = tmp_path_factory.mktemp("inv") / "stack.yml"
    path.write_text(yaml.safe_dump(inv))
    lab.stack_inventory = path  # type: ignore[attr-defined]
    return lab


def run(lab, probes="quick"):
    report = certify_mod.certify(str(lab.stack_inventory), probes=probes)
    return {n["host"]: n for n in report["nodes"]}


def bad(node):
    return {f["rule"]: f["status"] for f in node["findings"] if f["status"] != "PASS"}


def test_healthy_lab_passes_with_measurements(lab3):
    nodes = run(lab3)
    assert {h: bad(n) for h, n in nodes.items()} == {"node1": {}, "node2": {}, "node3": {}}
    names = {m["name"] for m in nodes["node1"]["measurements"]}
    assert {"nvbandwidth_h2d", "all_reduce_busbw", "ib_write_bw", "tcp_bw"} <= names


@pytest.mark.parametrize(
    ("fault", "rules"),
    [
        (["nic-down", "mlx5_0"], {"NIC-001": "FAIL", "BW-005": "FAIL"}),
        (["thermal-throttle", "0"], {"THR-001": "WARN"}),
        (["qos-drift", "mlx5_0"], {"NIC-002": "FAIL"}),
        (["nvlink-down", "1", "3"], {"NVL-001": "FAIL", "XID-001": "FAIL"}),
        (["pcie-downtrain", "2", "3", "8"], {"PCI-001": "FAIL", "BW-001": "FAIL"}),
        (["fabricmanager-fails"], {"FAB-001": "FAIL"}),
    ],
)
def test_fault_names_its_rule_and_spares_the_others(lab3, fault, rules):
    gpuboot("lab", "fault", "--name", lab3.name, "node2", *fault, check_rc=0)
    if fault[0] == "fabricmanager-fails":
        ssh(lab3, "node2", "systemctl restart nvidia-fabricmanager || true")
    try:
        nodes = run(lab3)
    finally:
        gpuboot("lab", "clear", "--reboot", "--name", lab3.name, "node2", check_rc=0)
        assert ssh(lab3, "node2", PROVISION).returncode == 0
    got = bad(nodes["node2"])
    for rule, status in rules.items():
        assert got.get(rule) == status, json.dumps(nodes["node2"]["findings"], indent=1)
    assert bad(nodes["node1"]) == {} and bad(nodes["node3"]) == {}


def test_removed_probe_tool_is_error_not_fail(lab3):
    ssh(lab3, "node3", "rm -f /usr/local/bin/nvbandwidth")
    try:
        nodes = run(lab3)
    finally:
        ssh(lab3, "node3", "ln -sf /opt/gpuemu/gpuemu /usr/local/bin/nvbandwidth")
    assert nodes["node3"]["verdict"] == "ERROR"
    assert set(bad(nodes["node3"])) == {"BW-001", "BW-002", "BW-003"}
    assert nodes["node1"]["verdict"] == "PASS"
