"""`install --check --diff` tells the truth: on fresh nodes it counts, per host, the very
tasks the real install then changes (and names them on the terminal), it changes nothing
itself, `plan` agrees on the packages, and on the converged nodes both say 0.
One fresh 3-node lab with a whole stack (packages, files, services, modules, QoS)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

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


OTHER = "prod-570-cuda12.8"  # node3's stack in the mixed-stack run
VERSION = re.compile(r"\d+\.\d+\.\d+")
HEADING = re.compile(r"^    [A-Z][A-Z0-9]*-\d+  ")  # a task line of a block (diffview._entry)


def blocks(text: str) -> dict[str, str]:
    """Each change-set block of the --diff text by its first line's host label."""
    found = {}
    for block in text.split("\n\n"):
        head = block.splitlines()[0] if block.strip() else ""
        if m := re.match(r"^(\S+) \(\d+ hosts?\)", head):
            found[m.group(1)] = block
    return found


def test_mixed_stacks_each_group_shows_its_own_versions(lab, tmp_path):
    """Two host groups on two stacks: no task heading carries a host's versions (Ansible
    templates a name once, with the first host's values, and shows it over every host's
    result), and each group's block carries its own stack's versions only. Only the pinned
    packages' tasks (STK-002's) run: the driver's heading was the one that misled."""
    site = yaml.safe_load(lab.inventory.read_text())
    site["all"]["children"]["gpu_nodes"]["hosts"]["node3"]["gpuboot_stack"] = OTHER
    mixed = tmp_path / "mixed.yml"
    mixed.write_text(yaml.safe_dump(site))
    proc = gpuboot(
        "install", "-i", str(mixed), "--check", "--diff", "--tags", "STK-002", "-q", check_rc=0
    )
    found = blocks(proc.stdout)
    assert set(found) == {"node[1-2]", "node3"}, proc.stdout[-3000:]
    headings = [ln for b in found.values() for ln in b.splitlines() if HEADING.match(ln)]
    assert headings and not [h for h in headings if VERSION.search(h)], headings
    assert "570.133.20" in found["node3"] and "570.133.20" not in found["node[1-2]"]
