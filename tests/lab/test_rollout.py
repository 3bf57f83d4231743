"""Rolling install on a 3-node lab: batches, a spent failure budget, and --resume."""

from __future__ import annotations

import json

import pytest

from .conftest import gpuboot, ssh

pytestmark = pytest.mark.lab

# A proxy nobody listens on: node2 cannot reach the package mirror (an operator's typo
# in apt.conf.d looks exactly like this). gpuboot's roles do not manage the file.
BREAK_MIRROR = (
    "echo 'Acquire::http::Proxy \"http://127.0.0.1:9/\";' > /etc/apt/apt.conf.d/99-broken-proxy"
)


def install(lab, *args, rc):
    proc = gpuboot("install", "-i", str(lab.inventory), "--json", *args, check_rc=rc)
    doc = json.loads(proc.stdout)
    return doc, {h: r["status"] for h, r in doc["hosts"].items()}


def installed(lab, node):
    return ssh(lab, node, "dpkg-query -W -f '${Status}' nvidia-utils-550").stdout


def test_rollout_stops_when_the_budget_is_spent_and_resumes(make_lab):
    lab = make_lab(nodes=3)
    assert ssh(lab, "node2", BREAK_MIRROR).returncode == 0

    first, status = install(lab, "--serial", "1", "--max-fail", "0", rc=1)
    assert status == {"node1": "changed", "node2": "failed", "node3": "pending"}
    assert first["rollout"]["failed"] == ["node2"] and first["rollout"]["pending"] == ["node3"]
    assert "more than --max-fail allows" in first["rollout"]["stopped"]
    assert first["hosts"]["node2"]["reason"]  # why it failed, in the operator's report
    assert installed(lab, "node1") == "hold ok installed"
    assert installed(lab, "node3") == ""  # the rollout never reached it

    assert ssh(lab, "node2", "rm /etc/apt/apt.conf.d/99-broken-proxy").returncode == 0
    # the operator fixes node2 on its own: that complete run must not hide the stopped one
    _, status = install(lab, "--limit", "node2", rc=0)
    assert status == {"node2": "changed"}
    # a plain --resume continues the stopped canary rollout with its own batch size and budget
    resumed, status = install(lab, "--resume", rc=0)
    assert resumed["resumed_from"] == first["run_id"]
    assert (resumed["rollout"]["batch_size"], resumed["rollout"]["budget"]) == (1, 0)
    assert status == {"node2": "ok", "node3": "changed"}  # node1 is not run again
    assert all(installed(lab, n) == "hold ok installed" for n in ("node1", "node2", "node3"))

    done = gpuboot("install", "-i", str(lab.inventory), "--resume", check_rc=0)
    assert "nothing to resume" in done.stdout
