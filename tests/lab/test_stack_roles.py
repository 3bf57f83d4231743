"""The whole stack's roles on node1 of a lab: converge a stack, stay put, upgrade, reboot,
downgrade (after each change and its reboot, certify passes and every role is
idempotent); last, node2 joins on the other branch and `matrix import` pins both halls.
One lab, tests run in file order (each builds on the node the previous left)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuboot.stacks import load_stack, mirror_packages
from gpuboot_lab import lab as labmod
from gpuboot_lab.kubeapi import FakeApiServer
from gpuboot_lab.kubeapi import node as k8s_node
from gpuboot_lab.kubeapi import pod as k8s_pod

from .conftest import gpuboot, reboot_markers, ssh_ok

pytestmark = pytest.mark.lab
LTS, PROD = "lts-550-cuda12.4", "prod-570-cuda12.8"
INSTALLED_550 = "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' | grep '^.i' | grep -- -550"


def pinned(stack: str) -> set[str]:
    """Every package the stack pins, the kernel aside (a lab node runs the host's kernel)."""
    s = load_stack(stack)
    kernel = {p.name for p in s.kernel_pins("debian").packages}
    site = {"gpuboot-probes"}  # the lab's site probe package, held by gpuboot_probe_tools
    return {name for name, _ in mirror_packages(s, "debian") if name not in kernel} | site


@pytest.fixture(scope="module")
def two_nodes(make_lab) -> tuple[labmod.Lab, dict]:
    """The lab, whose inventory names node1 alone, and node2's inventory entry: node2 joins
    only the import test's own inventory (a second hall on another branch)."""
    lab = make_lab(nodes=2, stack=LTS)
    doc = yaml.safe_load(lab.inventory.read_text())
    node2 = doc["all"]["children"]["gpu_nodes"]["hosts"].pop("node2")
    lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return lab, node2


@pytest.fixture(scope="module")
def lab(two_nodes) -> labmod.Lab:
    return two_nodes[0]


def install(lab, *extra) -> dict:
    proc = gpuboot("install", "-i", str(lab.inventory), "--json", *extra)
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return json.loads(proc.stdout)["hosts"]["node1"]


def use_stack(lab, stack: str) -> None:
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["all"]["vars"]["gpuboot_stack"] = stack
    lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def plan_changes(lab) -> dict:
    """Items of the plan that are not `keep`, the kernel aside (the lab leaves it alone)."""
    doc = json.loads(gpuboot("plan", "-i", str(lab.inventory), "--json", check_rc=0).stdout)
    (node,) = doc["nodes"]
    return {
        i["package"]: i["action"]
        for i in node["items"]
        if i["action"] != "keep" and not i["package"].startswith("linux-")
    }


def certify_passes(lab) -> None:
    """certify's rules (the molecule verifier runs the same) find nothing wrong with node1."""
    proc = gpuboot("certify", "-i", str(lab.inventory), "--probes", "none", "--json")
    (node,) = json.loads(proc.stdout)["nodes"]
    wrong = {f["rule"]: f["reason"] for f in node["findings"] if f["status"] != "PASS"}
    assert proc.returncode == 0 and node["verdict"] == "PASS", wrong


def test_check_mode_on_a_fresh_node_fails_nothing_and_changes_nothing(lab):
    result = install(lab, "--check")
    assert result["changed"] > 0
    assert (
        ssh_ok(lab, "dpkg-query -W -f '${Package}\\n' 'nvidia-*' 2>/dev/null || true").strip() == ""
    )


def test_converge_then_nothing_changes(lab):
    first = install(lab)
    assert first["status"] == "changed"
    second = install(lab, "--full")  # every role runs again: the roles are idempotent
    # every role ran (the fast path of an unchanged node stops at about 4 results)
    assert second["changed"] == 0 and second["ok"] > 20, second
    assert plan_changes(lab) == {}
    assert reboot_markers(lab) == []  # a fresh node loads everything at once


def test_an_unchanged_node_skips_the_roles(lab):
    third = install(lab)
    assert third["changed"] == 0 and third["ok"] <= 5, third
    assert third["task"].startswith("CONV-002"), third  # "nothing drifted: skip the roles"


DCGM_PIN = "/etc/apt/preferences.d/gpuboot-dcgm"
ECN_SWITCH = "/run/gpuemu/sys/class/net/enp26s0np0/ecn/roce_np/enable/3"  # the lab's sysfs
# What the install roles manage, drifted one part at a time, how to put it back, and
# the part of the fingerprint that must notice.
DRIFTS = {
    "hold released": (
        "apt-mark unhold datacenter-gpu-manager",
        "apt-mark hold datacenter-gpu-manager",
        "packages",
    ),
    "pin file edited": (
        f"cp {DCGM_PIN} /root/pin && echo '# local' >> {DCGM_PIN}",
        f"mv /root/pin {DCGM_PIN}",
        "files",
    ),
    "ECN switched off": (
        f"echo 0 > {ECN_SWITCH}",
        f"echo 1 > {ECN_SWITCH}",
        "qos",
    ),
    "service stopped": ("systemctl stop nvidia-dcgm", "systemctl start nvidia-dcgm", "units"),
    "module unloaded": ("modprobe -r nvidia_peermem", "modprobe nvidia_peermem", "modules"),
    "reboot requested": (
        "touch /run/reboot-required.gpuboot-test",
        "rm /run/reboot-required.gpuboot-test",
        "reboot-pending",
    ),
}


def converged_check(lab) -> str:
    """What the fast path concluded (CONV-002's message), read from the
    run's job events: `install --check --tags converged` runs only the comparison."""
    proc = gpuboot("install", "-i", str(lab.inventory), "--check", "--tags", "converged", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = Path(json.loads(proc.stdout)["run_dir"]) / "artifacts" / "job" / "job_events"
    for path in events.glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event["event"] == "runner_on_ok" and data.get("task", "").startswith("CONV-002"):
            return data["res"]["msg"]
    raise AssertionError("the run never compared the node with its last converge")


@pytest.mark.parametrize("drift", DRIFTS)
def test_any_drift_runs_the_roles(lab, drift):
    make, undo, part = DRIFTS[drift]
    ssh_ok(lab, make)
    try:
        assert converged_check(lab) == f"differs: {part}", f"{drift} went unnoticed"
    finally:
        ssh_ok(lab, undo)
    assert converged_check(lab).startswith("state and desired state match"), drift


def test_a_released_hold_fails_certification(lab):
    # The compliance side of the same drift: certify (and so a scheduled scan) names it.
    ssh_ok(lab, "apt-mark unhold datacenter-gpu-manager")
    try:
        proc = gpuboot("certify", "-i", str(lab.inventory), "--probes", "none", "--json")
    finally:
        ssh_ok(lab, "apt-mark hold datacenter-gpu-manager")
    assert proc.returncode != 0, proc.stdout[-2000:]
    (node,) = json.loads(proc.stdout)["nodes"]
    failed = {
        f["rule"]: f["reason"] for f in node["findings"] if f["status"] not in ("PASS", "SKIPPED")
    }
    assert failed == {"STK-002": "not held: datacenter-gpu-manager"}, failed


def test_a_drifted_node_is_repaired_then_skipped_again(lab):
    gpuboot("lab", "fault", "--name", lab.name, "node1", "qos-drift", check_rc=0)
    ssh_ok(lab, f"echo 0 > {ECN_SWITCH}")
    # --check tells the truth about commands it does not run: both would run.
    checked = [c.split(" ")[0] for c in install(lab, "--check")["changes"]]
    assert "QOS-011" in checked, checked
    assert ssh_ok(lab, f"cat {ECN_SWITCH}").strip() == "0"  # and changed nothing
    repaired = install(lab)
    assert ssh_ok(lab, f"cat {ECN_SWITCH}").strip() == "1"
    assert any(c.startswith("QOS-011") for c in repaired["changes"]), repaired
    assert install(lab)["task"].startswith("CONV-002")
    assert install(lab, "--full")["changed"] == 0


def test_a_loaded_nouveau_is_recorded_for_the_reboot_once(lab):
    # The lab kernel's view: nouveau loaded (an initramfs older than the blacklist loads it).
    loaded = "/run/gpuemu/sys/module/nouveau"
    marker = "/run/reboot-required.gpuboot-nouveau"
    ssh_ok(lab, f"mkdir {loaded}")
    try:
        checked = install(lab, "--check", "--tags", "BASE-014")
        assert [c[:8] for c in checked["changes"]] == ["BASE-014"], checked
        assert reboot_markers(lab) == []  # --check wrote nothing
        assert [c[:8] for c in install(lab, "--tags", "BASE-014")["changes"]] == ["BASE-014"]
        assert ssh_ok(lab, f"cat {marker}") == "nouveau loaded, blacklisted\n"
        assert install(lab, "--tags", "BASE-014")["changed"] == 0  # recorded once
    finally:
        ssh_ok(lab, f"rmdir {loaded}; rm -f {marker}")
    assert install(lab, "--tags", "BASE-014")["changed"] == 0  # not loaded: nothing to record


def test_every_pinned_package_is_held_and_pinned(lab):
    holds = set(ssh_ok(lab, "apt-mark showhold").split())
    assert holds == pinned(LTS)
    prefs = ssh_ok(lab, "cat /etc/apt/preferences.d/gpuboot-*")
    for name in pinned(LTS):
        assert f"Package: {name}\n" in prefs
    loaded = ssh_ok(lab, "lsmod")
    for module in ("nvidia_peermem", "nvidia_fs", "mlx5_ib"):
        assert module in loaded
    assert (
        ssh_ok(lab, "systemctl is-active nvidia-fabricmanager nvidia-dcgm openibd").split()
        == ["active"] * 3
    )


def test_unattended_upgrade_changes_no_pinned_package(lab):
    # The lab repository serves newer releases (550.144.03, DCGM 4, ...): nothing may move.
    for cmd in ("apt-get -s upgrade", "apt-get -s dist-upgrade"):
        out = ssh_ok(lab, cmd)
        changes = [line for line in out.splitlines() if line.startswith(("Inst ", "Remv "))]
        moved = {line.split()[1] for line in changes}
        assert not moved & pinned(LTS), f"{cmd}: {sorted(moved & pinned(LTS))}"
    config = ssh_ok(lab, "apt-config dump Unattended-Upgrade::Package-Blacklist")
    for pattern in ("^nvidia-", "^libnvidia-", "^cuda-", "^doca-", "^datacenter-gpu-manager"):
        assert f'"{pattern}"' in config
    has_uu = ssh_ok(lab, "command -v unattended-upgrade || true").strip()
    if has_uu:  # not in the lab image (no Debian archive on lab nodes); real nodes have it
        ssh_ok(lab, "unattended-upgrade --dry-run")
        assert set(ssh_ok(lab, "apt-mark showhold").split()) == pinned(LTS)


@pytest.fixture
def cluster(tmp_path):
    """A fake API server where node1 is a cluster member running a pod."""
    server = FakeApiServer().start()
    try:
        server.add(k8s_node("node1"))
        server.add_pod(k8s_pod("train-0", "node1", owner="StatefulSet"))
        yield server, str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    finally:
        server.stop()


def test_upgrade_to_570_then_reboot_loads_it(lab, cluster):
    server, kubeconfig = cluster
    use_stack(lab, PROD)
    check = gpuboot(
        "install", "-i", str(lab.inventory), "--json", "--check", "--kubeconfig", kubeconfig,
        check_rc=0,
    )  # fmt: skip
    assert json.loads(check.stdout)["would_drain"] == ["node1"] and server.requests == []
    # A PodDisruptionBudget holds the pod: the node cannot be drained, so it is not touched.
    server.pdb_blocked.add(("default", "train-0"))
    proc = gpuboot(
        "install", "-i", str(lab.inventory), "--json", "--kubeconfig", kubeconfig,
        "--drain-timeout", "3",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    held = json.loads(proc.stdout)["hosts"]["node1"]
    assert held["failed_task"].startswith("K8S-DRAIN") and "PodDisruptionBudget" in held["reason"]
    assert ssh_ok(lab, INSTALLED_550 + " || true") != ""  # still the old stack
    assert server.nodes["node1"]["spec"]["unschedulable"] is True

    server.pdb_blocked.clear()
    assert install(lab, "--kubeconfig", kubeconfig)["changed"] > 0
    assert server.evictions()[-1] == "default/train-0" and server.pods == {}
    assert server.nodes["node1"]["spec"]["unschedulable"] is True  # until it certifies again
    assert set(ssh_ok(lab, "apt-mark showhold").split()) == pinned(PROD)
    # The old branch is gone, not left behind held.
    assert ssh_ok(lab, INSTALLED_550 + " || true") == ""
    # The 550 kernel modules stay loaded until the node reboots: recorded, not done.
    pending = reboot_markers(lab)
    assert "/run/reboot-required.gpuboot-nvidia-driver" in pending
    assert "/run/reboot-required.gpuboot-fabricmanager" in pending
    labmod.reboot(lab.name, "node1")
    assert reboot_markers(lab) == []
    assert "Driver Version: 570.133.20" in ssh_ok(lab, "nvidia-smi")
    assert "nvidia_peermem" in ssh_ok(lab, "lsmod")  # modules-load.d brought it back
    assert plan_changes(lab) == {}
    certify_passes(lab)
    assert install(lab, "--full")["changed"] == 0  # every role, over the changed stack
    # Nothing changes now: a cluster member is not drained again.
    requests = len(server.requests)
    assert install(lab, "--kubeconfig", kubeconfig)["changed"] == 0
    assert len(server.requests) == requests


def test_downgrade_back_to_550(lab):
    use_stack(lab, LTS)
    assert install(lab)["changed"] > 0
    assert set(ssh_ok(lab, "apt-mark showhold").split()) == pinned(LTS)
    labmod.reboot(lab.name, "node1")
    assert "Driver Version: 550.54.15" in ssh_ok(lab, "nvidia-smi")
    assert plan_changes(lab) == {}
    certify_passes(lab)
    assert install(lab, "--full")["changed"] == 0


LEASE = "/var/lib/gpuboot/lease.json"


def test_two_controllers_never_converge_the_node_at_once(lab, tmp_path):
    """Two GPUBOOT_HOMEs (two halls' controllers, each with its own locks) install node1 at
    once: the one holding the node's lease proceeds, the other is refused naming it; a lease
    whose holder died (expired) is taken over."""
    import os
    import subprocess
    import sys
    import time

    hall_b = {**os.environ, "GPUBOOT_HOME": str(tmp_path / "hall-b")}

    def install_b(*extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gpuboot.cli", "install", "-i", str(lab.inventory)]
        return subprocess.run(
            [*argv, "--json", *extra], capture_output=True, text=True, env=hall_b, timeout=600
        )

    # hall A runs the roles before DCGM's (under --tags the fast path, which takes no
    # lease, is out): the node is held for their length
    tags = "baseline,repo,ofed,driver,fabricmanager,peermem,dcgm"
    hall_a = subprocess.Popen(
        [sys.executable, "-m", "gpuboot.cli", "install", "-i", str(lab.inventory), "--tags", tags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    try:
        deadline = started + 120
        while not (held := ssh_ok(lab, f"cat {LEASE} 2>/dev/null || true")):
            assert hall_a.poll() is None and time.monotonic() < deadline, "A took no lease"
            time.sleep(0.3)
        holder = json.loads(held)
        refused = install_b("--tags", "baseline")
        assert refused.returncode == 1, refused.stderr[-2000:]  # 0: A was done already
        node = json.loads(refused.stdout)["hosts"]["node1"]
        assert node["failed_task"].startswith("INST-004"), node
        assert f"controller {holder['controller']} (run {holder['run_id']}" in node["reason"]
    finally:
        _, err = hall_a.communicate(timeout=600)
    assert hall_a.returncode == 0, err[-2000:]
    print(f"hall A held node1 for its run of {time.monotonic() - started:.1f} s")
    assert ssh_ok(lab, f"cat {LEASE} 2>/dev/null || true") == ""  # given back at the end

    # a controller killed mid-run leaves its lease; once expired, another takes it over
    dead = {"run_id": "killed", "controller": "gone home 000000000000", "taken": 1, "expires": 2}
    ssh_ok(lab, f"mkdir -p /var/lib/gpuboot && echo '{json.dumps(dead)}' > {LEASE}")
    took = install_b("--tags", "baseline")
    assert took.returncode == 0, took.stdout[-2000:] + took.stderr[-2000:]
    assert ssh_ok(lab, f"cat {LEASE} 2>/dev/null || true") == ""


def test_matrix_import_pins_a_550_hall_and_a_570_hall_and_install_keeps_both(two_nodes, tmp_path):
    """Adopting a running fleet: hall 550 (node1, as the tests above left it, converged
    here when run alone) and hall 570 (node2) become two site stacks that `matrix check`
    accepts, and pointing each hall at its stack changes nothing (install --check, plan)."""
    lab, node2 = two_nodes
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["all"]["vars"]["gpuboot_stack"] = LTS
    node1 = doc["all"]["children"]["gpu_nodes"]["hosts"]["node1"]
    halls = {"hall_550": {"hosts": {"node1": node1}}, "hall_570": {"hosts": {"node2": node2}}}
    halls["hall_570"]["vars"] = {"gpuboot_stack": PROD}
    doc["all"]["children"]["gpu_nodes"] = {"children": halls}
    fleet = tmp_path / "fleet.yml"
    fleet.write_text(yaml.safe_dump(doc, sort_keys=False))
    converged = gpuboot("install", "-i", str(fleet), "--json", check_rc=0)
    assert json.loads(converged.stdout)["hosts"]["node2"]["changed"] > 0
    assert "Driver Version: 570.133.20" in ssh_ok(lab, "nvidia-smi", "node2")

    site = tmp_path / "site"
    imported = json.loads(
        gpuboot(
            "matrix", "import", "-i", str(fleet), "--out", str(site), "--json", check_rc=0
        ).stdout
    )
    assert [(s["stack"], s["hosts"]) for s in imported["stacks"]] == [
        ("site-hall-550", ["node1"]),
        ("site-hall-570", ["node2"]),
    ], imported
    for entry in imported["stacks"]:
        gpuboot("matrix", "check", entry["file"], "--json", check_rc=0)
        hall = entry["stack"].removeprefix("site-").replace("-", "_")
        halls[hall]["vars"] = {"gpuboot_stack": entry["file"]}
    fleet.write_text(yaml.safe_dump(doc, sort_keys=False))

    kept = json.loads(gpuboot("install", "-i", str(fleet), "--check", "--json", check_rc=0).stdout)
    assert {h: r["changed"] for h, r in kept["hosts"].items()} == {"node1": 0, "node2": 0}, kept
    planned = json.loads(gpuboot("plan", "-i", str(fleet), "--json", check_rc=0).stdout)
    assert {n["host"]: n["changes"] for n in planned["nodes"]} == {"node1": 0, "node2": 0}
