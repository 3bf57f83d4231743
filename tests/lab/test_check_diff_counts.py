"""`install --check --diff` tells the truth: on fresh nodes it counts, per host, the very
tasks the real install then changes (and names them on the terminal), it changes nothing
itself, `plan` agrees on the packages, and on the converged nodes both say 0.
One fresh 3-node lab with a whole stack (packages, files, services, modules, QoS)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import gpuboot, ssh_ok

pytestmark = pytest.mark.lab

STACK = "lts-550-cuda12.4"
NODES = ("node1", "node2", "node3")
# What a --check must leave as it was: packages, versions, holds, pins, units, module lists.
SNAPSHOT = (
    "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n'; apt-mark showhold; "
    "ls -l --time-style=+ /etc/apt/preferences.d /etc/apt/sources.list.d "
    "/etc/modules-load.d /etc/systemd/system 2>&1; "
    "systemctl is-enabled nvidia-persistenced nvidia-dcgm openibd 2>&1 || true"
)


@pytest.fixture(scope="module")
def lab(make_lab):
    return make_lab(nodes=3, stack=STACK)


def snapshot(lab) -> dict[str, str]:
    return {n: ssh_ok(lab, SNAPSHOT, n) for n in NODES}


def check_diff(lab) -> tuple[str, dict[str, dict]]:
    """The terminal text of `install --check --diff` and its hosts' results."""
    proc = gpuboot("install", "-i", str(lab.inventory), "--check", "--diff", "-q", check_rc=0)
    run_dir = re.search(r"run dir (\S+)", proc.stdout)
    assert run_dir, proc.stdout[-2000:]
    hosts = json.loads((Path(run_dir.group(1)) / "results.json").read_text())["hosts"]
    return proc.stdout, hosts


def changed_tasks(hosts: dict[str, dict]) -> dict[str, list[str]]:
    return {h: sorted(t.split(" | ")[0] for t in r["changes"]) for h, r in hosts.items()}


def test_fresh_check_counts_what_the_real_run_changes(lab):
    before = snapshot(lab)
    text, checked = check_diff(lab)
    assert snapshot(lab) == before, "--check changed a node"
    assert "nvidia-driver-550-open: (not installed) -> 550.54.15-1 held" in text, text[:3000]
    assert "node[1-3] (3 hosts)" in text  # one block for three identical nodes

    planned = json.loads(gpuboot("plan", "-i", str(lab.inventory), "--json", check_rc=0).stdout)
    for node in planned["nodes"]:  # plan and --check agree on the packages that change
        for item in node["items"]:
            shown = f"\n      {item['package']}: " in text
            assert shown == (item["action"] != "keep"), (node["host"], item)

    real = json.loads(gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0).stdout)
    real_counts = {h: r["changed"] for h, r in real["hosts"].items()}
    assert {h: r["changed"] for h, r in checked.items()} == real_counts
    assert changed_tasks(checked) == changed_tasks(real["hosts"])  # the same tasks, too
    assert min(real_counts.values()) > 20, real_counts


def test_converged_check_and_real_both_count_zero(lab):
    text, checked = check_diff(lab)
    assert {h: r["changed"] for h, r in checked.items()} == dict.fromkeys(NODES, 0)
    assert "node[1-3] (3 hosts): nothing to change" in text
    real = json.loads(gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0).stdout)
    assert {h: r["changed"] for h, r in real["hosts"].items()} == dict.fromkeys(NODES, 0)
