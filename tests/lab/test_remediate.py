"""Remediation on the shared 2-node lab (lab2, installed and healthy) in a fake Kubernetes
cluster: node1 shows Xid 79 (a GPU fallen off the bus; the catalogue asks for a reboot).
`gpuboot remediate` drains it, reboots it through the install's reboot role (its boot time
changes), certifies it again and the join gate returns it to service. The same fault back
afterwards starts above the reboot already tried (the dry run shows the climb), and the
node is left as it was found (the fault cleared by a reboot).

Quarantine, the 3-actions bound and `node release` are tested against the fake API without
a lab (tests/unit/test_remediate_run.py, tests/unit/cli/test_node_cli.py): reaching them
here would cost a full reinstall of a lab node.
"""

from __future__ import annotations

import json

import pytest
import yaml

from gpuboot_lab import lab as labmod
from gpuboot_lab.kubeapi import FakeApiServer, node

from .conftest import gpuboot, ssh, ssh_ok

pytestmark = pytest.mark.lab
NODES = ("node1", "node2")
TAINT = "gpuboot.io/uncertified"


@pytest.fixture
def lab(lab2) -> labmod.Lab:
    """lab2 with its stack installed (the flow tests install it; alone, this test does)."""
    if any(ssh(lab2, n, "dpkg -s nvidia-utils-550 >/dev/null").returncode for n in NODES):
        gpuboot("install", "-i", str(lab2.inventory), "-q", check_rc=0)
    return lab2


def _remediate(lab, tmp_path, kubeconfig, *extra: str) -> tuple[int, dict]:
    # one node certified alone has no pair partner, and the lab's driver-only stack runs no
    # CUDA, DCGM or DOCA probe: its certificate is partial, which the join gate accepts only
    # where the node's gpuboot_accept_partial names both gaps
    site = yaml.safe_load(lab.inventory.read_text())
    site["all"].setdefault("vars", {})["gpuboot_accept_partial"] = ["no-pair", "no-tool"]
    accepting = tmp_path / "site.yml"
    accepting.write_text(yaml.safe_dump(site))
    proc = gpuboot(
        "remediate", "-i", str(accepting), "--limit", "node1", "--kubeconfig", kubeconfig,
        "--sign-key", str(tmp_path / "key.pem"), "--history", str(tmp_path / "h.jsonl"),
        "--json", *extra,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def test_an_xid_79_node_is_rebooted_certified_and_back_in_service(lab, tmp_path):
    gpuboot("cert", "keygen", str(tmp_path / "key.pem"), check_rc=0)
    server = FakeApiServer().start()
    try:
        for name in NODES:
            server.add(node(name))
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        booted = ssh_ok(lab, labmod.LAB_BOOT_TIME_COMMAND)
        gpuboot("lab", "fault", "--name", lab.name, "node1", "xid", "79", "0", check_rc=0)
        rc, doc = _remediate(lab, tmp_path, kubeconfig)  # its own history: nothing tried
        (n1,) = doc["nodes"]
        assert n1["fault"]["bucket"] == "RESTART_BM", n1
        assert [(s["step"], s["result"]) for s in n1["steps"]] == [("reboot", "passed")], n1
        assert rc == 0 and "back in service" in n1["steps"][0]["detail"]
        assert ssh_ok(lab, labmod.LAB_BOOT_TIME_COMMAND) != booted  # it really rebooted
        stored = server.nodes["node1"]
        assert stored["metadata"]["labels"].get("gpuboot.io/certified") == "true"
        assert not any(t.get("key") == TAINT for t in stored["spec"].get("taints") or [])
        assert not stored["spec"].get("unschedulable")  # the drain's cordon was lifted
        actions = json.loads(stored["metadata"]["annotations"]["gpuboot.io/actions"])
        assert (actions[-1]["step"], actions[-1]["result"]) == ("reboot", "passed")
        # the same fault back: another reboot is not the answer
        gpuboot("lab", "fault", "--name", lab.name, "node1", "xid", "79", "0", check_rc=0)
        _rc, doc = _remediate(lab, tmp_path, kubeconfig, "--dry-run")
        assert [s["step"] for s in doc["nodes"][0]["steps"]] == ["reinstall", "quarantine"]
    finally:
        server.stop()
        gpuboot("lab", "clear", "--reboot", "--name", lab.name, "node1", check_rc=0)
