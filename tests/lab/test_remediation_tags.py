"""Remediation by tag on a converged 1-node lab: a drift certify names (STK-002: a hold
released; NIC-002: RoCE trust moved) is repaired by `gpuboot install --tags <RULE>`, which runs
the tasks tagged with that rule and the AUDIT tasks tagged always, nothing else; certify then
passes the rule. Last, RDMA for pods (RDM-001..006) switched on for the node: converge,
certify, one fault repaired by its tag, a reboot. One lab, tests in file order."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from gpuboot import ids
from gpuboot_lab import lab as labmod

from .conftest import gpuboot, ssh_ok

pytestmark = pytest.mark.lab
LTS = "lts-550-cuda12.4"
# rule -> (drift on node1, its undo if the remediation fails, the reason certify gives)
DRIFTS = {
    "STK-002": (
        "apt-mark unhold datacenter-gpu-manager",
        "apt-mark hold datacenter-gpu-manager",
        "not held: datacenter-gpu-manager",
    ),
    "NIC-002": (
        "mlnx_qos -i enp26s0np0 --trust pcp",
        "mlnx_qos -i enp26s0np0 --trust dscp",
        "enp26s0np0 trust pcp, want dscp",
    ),
}


@pytest.fixture(scope="module")
def lab(make_lab) -> labmod.Lab:
    lab = make_lab(nodes=1, stack=LTS)
    gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0)
    return lab


def finding(lab, rule: str) -> dict:
    proc = gpuboot("certify", "-i", str(lab.inventory), "--probes", "none", "--json")
    (node,) = json.loads(proc.stdout)["nodes"]
    return next(f for f in node["findings"] if f["rule"] == rule)


def ran(run_dir: str) -> dict[str, bool]:
    """Task id -> changed, for every task the run executed on the node (skips left out)."""
    out: dict[str, bool] = {}
    for path in sorted((Path(run_dir) / "artifacts" / "job" / "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        if event["event"] not in ("runner_on_ok", "runner_item_on_ok"):
            continue
        data = event.get("event_data", {})
        task_id = str(data.get("task", "")).split(" | ")[0]
        if ids.ID_RE.fullmatch(task_id):
            out[task_id] = out.get(task_id, False) or bool(data.get("res", {}).get("changed"))
    return out


@pytest.mark.parametrize("rule", list(DRIFTS))
def test_install_tags_rule_repairs_what_certify_found(lab, rule):
    drift, undo, reason = DRIFTS[rule]
    ssh_ok(lab, drift)
    try:
        failed = finding(lab, rule)
        assert failed["status"] == "FAIL" and reason in failed["reason"], failed
        # the hint is a complete command: run as printed (-i the inventory, --limit the node)
        hint = shlex.split(failed["remediate"])
        assert hint[:3] == ["gpuboot", "install", "-i"] and hint[-2:] == ["--tags", rule]
        assert "--limit" in hint
        proc = gpuboot(*hint[1:], "--json")
        assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        done = ran(json.loads(proc.stdout)["run_dir"])
        fixed = finding(lab, rule)
    except BaseException:
        ssh_ok(lab, undo)  # leave the node converged for the next case
        raise
    assert fixed["status"] == "PASS", fixed
    tasks = {t.id: t for t in ids.tasks()}
    stray = {i for i in done if not (rule in tasks[i].tags or tasks[i].always)}
    assert not stray, f"--tags {rule} ran tasks not tagged with it: {sorted(stray)}"
    changed = {i for i, c in done.items() if c}
    assert changed and changed <= set(failed["fix_tasks"]), (changed, failed["fix_tasks"])
    assert not any(i.startswith("CONV-") for i in done)  # no fast path, no record under --tags


RDM = [f"RDM-00{i}" for i in range(1, 7)]


def failing(lab) -> set[str]:
    proc = gpuboot("certify", "-i", str(lab.inventory), "--probes", "none", "--json")
    (node,) = json.loads(proc.stdout)["nodes"]
    rdm = {f["rule"]: f["status"] for f in node["findings"] if f["rule"] in RDM}
    assert sorted(rdm) == RDM, rdm  # every RDM rule judged (none SKIPPED: sriov is set)
    return {f["rule"] for f in node["findings"] if f["status"] == "FAIL"}


def test_rdma_for_pods_converges_certifies_and_a_lossy_cm_tos_is_repaired_by_its_tag(lab):
    """The H100 profile's 8 rails in sriov mode: install makes the VFs, the namespace mode
    and RDMA CM's defaults; certify passes RDM-001..006; a lossy RDMA CM ToS fails RDM-005
    alone and `install --tags RDM-005` repairs it; a reboot keeps it all (the boot unit and
    ib_core's option); a re-run changes nothing."""
    inventory = yaml.safe_load(lab.inventory.read_text())
    inventory["all"]["vars"].update(
        gpuboot_rdma_cni="sriov",
        gpuboot_rdma_vfs=2,
        gpuboot_configfs="/run/gpuemu/config",  # the emulated kernel's configfs
    )
    lab.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))
    gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0)
    before = failing(lab)
    assert not before & set(RDM), before
    assert ssh_ok(lab, "rdma system").startswith("netns exclusive")
    assert ssh_ok(lab, "ls -d /run/gpuemu/sys/class/net/*/device/virtfn*").count("virtfn") == 16

    labmod.emulator_ctl(lab.name, "node1", "fault", "add", "cm-tos-lossy")
    try:
        assert failing(lab) - before == {"RDM-005"}
        failed = finding(lab, "RDM-005")
        hint = shlex.split(failed["remediate"])
        assert hint[-2:] == ["--tags", "RDM-005"], hint
        proc = gpuboot(*hint[1:], "--json")
        assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        assert {i for i, c in ran(json.loads(proc.stdout)["run_dir"]).items() if c} == {"RDMA-015"}
        assert finding(lab, "RDM-005")["status"] == "PASS"
    finally:
        labmod.emulator_ctl(lab.name, "node1", "fault", "clear", "cm-tos-lossy")

    labmod.reboot(lab.name, "node1")
    assert not failing(lab) & set(RDM)  # VFs, MTUs, CM defaults and the mode came back
    again = json.loads(gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0).stdout)
    assert again["hosts"]["node1"]["changed"] == 0, again["hosts"]["node1"]
