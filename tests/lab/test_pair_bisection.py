"""Second-pass bisection of pair probes on a 3-node lab: one node's NIC
moves a third of its bandwidth, so both ring pairs it is in fall below the band. Each
member of a failed pair is re-tested with a known-good partner of the same run: the slow
node stays slow and FAILs BW-005; its first ring partner is cleared and PASSes, saying
which pair failed and which re-test cleared it.

Three nodes: with two, a failed pair has no known-good partner (nobody is blamed). The
nodes are fresh (no install): ib_write_bw is linked to the emulator as the DOCA-OFED
package would ship it, and only the pair probes' rule is judged here.
"""

from __future__ import annotations

import json

import pytest
import yaml

from gpuboot import certify as certify_mod

from .conftest import gpuboot, ssh

pytestmark = pytest.mark.lab
SLOW = "node2"
SETUP = (
    "ln -sf /opt/gpuemu/gpuemu /usr/bin/ib_write_bw && modprobe mlx5_ib"
    " && /opt/gpuemu/gpuemu ibstat -l"
)


@pytest.fixture(scope="module")
def report(make_lab, tmp_path_factory):
    lab = make_lab(nodes=3)
    for node in ("node1", "node2", "node3"):
        out = ssh(lab, node, SETUP)
        assert out.returncode == 0 and "mlx5_0" in out.stdout, f"{node}: {out.stderr}"
    gpuboot(
        "lab", "fault", "--name", lab.name, SLOW, "low-bandwidth", "ib_write_bw", "0.3", check_rc=0
    )
    inv = yaml.safe_load(lab.inventory.read_text())
    inv["all"].setdefault("vars", {})["doca_ofed_enabled"] = True
    path = tmp_path_factory.mktemp("inv") / "pairs.yml"
    path.write_text(yaml.safe_dump(inv))
    rep = certify_mod.certify(str(path), probes="quick").to_dict()
    return {n["host"]: n for n in rep["nodes"]}


def _bw005(node: dict) -> dict:
    return next(f for f in node["findings"] if f["rule"] == "BW-005")


def test_the_slow_node_fails_after_a_retry_with_a_known_good_partner(report):
    f = _bw005(report[SLOW])
    assert f["status"] == "FAIL", json.dumps(f, indent=1)
    assert "retry with known-good" in f["reason"], f


def test_its_first_partner_is_cleared_saying_why(report):
    # ring: node1 serves node2 first; node1's pair with node2 failed, node1 was re-tested
    f = _bw005(report["node1"])
    assert f["status"] == "PASS", json.dumps(f, indent=1)
    assert "cleared: pair with node2 below its band" in f["reason"], f
    assert "retry with known-good node3 ok" in f["reason"], f
    assert _bw005(report["node3"])["status"] == "PASS"
