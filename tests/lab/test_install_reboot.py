"""The install play's last step (role gpuboot_reboot) on a 1-node lab: a driver upgrade
leaves the old module loaded and records a reboot; without permission the node is only
reported, with `gpuboot install --allow-reboot` (extra var gpuboot_allow_reboot) it
reboots once for real (ansible.builtin.reboot, systemd in the node), comes back and is
verified. One lab, tests run in file order (each builds on the node the previous left)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from gpuboot.runner import PlayResult, RunSpec, run
from gpuboot_lab import lab as labmod
from gpuboot_lab.podman import podman

from .conftest import gpuboot, reboot_markers, ssh_ok

pytestmark = pytest.mark.lab
OLD, NEW = labmod.LAB_DRIVER[1], "550.144.03-1"  # the lab's default pin, then an upgrade
OLD_UP, NEW_UP = "550.54.15", "550.144.03"  # what the kernel module reports for each
MARKER = "/run/reboot-required.gpuboot-nvidia-driver"
REBOOT_TASK = "REBOOT-010 | PATCH | Reboot once to finish the recorded changes"
VERIFY_TASK = "REBOOT-023 | AUDIT | Check the pinned driver is the one loaded"


@pytest.fixture(scope="module")
def lab(make_lab) -> labmod.Lab:
    """A node on the lab's default driver, then pinned to a newer one of the same branch."""
    assert OLD.startswith(OLD_UP)
    lab = make_lab(nodes=1)
    assert install(lab)["status"] == "changed"
    assert reboot_markers(lab) == []  # a fresh node loads the driver at once: no reboot needed
    set_var(lab, "nvidia_driver_version", NEW)
    return lab


def install(lab, *flags: str, rc: int = 0) -> dict:
    """`gpuboot install --json` as an operator runs it; returns node1's result."""
    proc = gpuboot("install", "-i", str(lab.inventory), "--json", *flags)
    assert proc.returncode == rc, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr}"
    doc = json.loads(proc.stdout)
    return {**doc["hosts"]["node1"], "output": play_output(doc["run_dir"])}


def set_var(lab, name: str, value) -> None:
    inventory = yaml.safe_load(lab.inventory.read_text())
    inventory["all"]["vars"][name] = value
    lab.inventory.write_text(yaml.safe_dump(inventory, sort_keys=False))


def play_output(run_dir: str | Path) -> str:
    """ansible-playbook's own output of a run (one job per batch)."""
    outputs = sorted(Path(run_dir).rglob("artifacts/job/stdout"))
    assert outputs, f"no ansible output under {run_dir}"
    return "\n".join(p.read_text() for p in outputs)


def boots(lab) -> dict:
    """How often the node booted, seen from three sides: the emulator's boot counter (its
    boot unit runs once per boot), podman's restarts of the container and PID 1's start."""
    status = json.loads(labmod.emulator_ctl(lab.name, "node1", "status"))
    cid = lab.node("node1").container_id
    started, restarts = (
        podman("inspect", "--format", "{{.State.StartedAt}}|{{.RestartCount}}", cid)
        .stdout.strip()
        .split("|")
    )
    return {
        "boot_count": int(status["boot_count"]),
        "podman_restarts": int(restarts),
        "started_at": started,
        "pid1_start": ssh_ok(lab, labmod.LAB_BOOT_TIME_COMMAND).strip(),
    }


def loaded_driver(lab) -> str:
    return ssh_ok(lab, "cat /run/gpuemu/proc/driver/nvidia/version")


def test_never_reboots_the_controller(tmp_path):
    """An inventory that names the controller (connection local) gets a refusal, not a
    reboot. The reboot command is /bin/true here so that a broken guard cannot take this
    machine down: the play would then get to REBOOT-010 (where ansible's reboot action
    refuses a local connection too), not fail at the role's own refusal."""
    marker_dir = tmp_path / "run"
    marker_dir.mkdir()
    (marker_dir / "reboot-required.gpuboot-kernel").write_text("kernel 6.1 running, 6.8 pinned\n")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"controller": {}, "localhost": {}},
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "gpuboot_reboot_marker_dir": str(marker_dir),
                        "gpuboot_reboot_command": "/bin/true",
                        "gpuboot_reboot_boot_time_command": "echo unchanged",
                        "gpuboot_reboot_timeout": 5,
                    },
                }
            }
        )
    )
    playbook = tmp_path / "reboot.yml"
    playbook.write_text(
        "- name: Reboot step alone\n  hosts: all\n  gather_facts: false\n"
        "  roles: [gpuboot_reboot]\n"
    )

    def play(allow: bool) -> PlayResult:
        spec = RunSpec(
            playbook=playbook,
            inventory=(inventory,),
            label="reboot-guard",
            extravars={"gpuboot_allow_reboot": allow},
        )
        return run(spec)

    pending = play(allow=False)
    assert pending.rc == 0
    statuses = {h: r.status for h, r in pending.hosts.items()}
    assert statuses == {"controller": "ok", "localhost": "ok"}
    assert "reboot pending: kernel: kernel 6.1 running, 6.8 pinned" in play_output(pending.run_dir)

    refused = play(allow=True)
    for host in ("controller", "localhost"):
        result = refused.hosts[host]
        assert result.status == "failed", result
        assert result.failed_task == "REBOOT-004 | AUDIT | Refuse to reboot the controller"
        assert "gpuboot does not reboot the machine it runs on" in (result.reason or "")
        assert REBOOT_TASK not in result.changes
    assert (marker_dir / "reboot-required.gpuboot-kernel").exists()


def test_without_permission_the_node_is_reported_not_rebooted(lab):
    before = boots(lab)
    node = install(lab)
    assert any(c.startswith("DRV-010 |") for c in node["changes"]), node  # the upgrade
    # The old module stays loaded: the driver role recorded the reboot, nothing did it.
    assert reboot_markers(lab) == [MARKER]
    assert OLD_UP in loaded_driver(lab)
    assert REBOOT_TASK not in node["changes"]
    assert boots(lab) == before
    assert "REBOOT-003 | AUDIT | Reboot pending" in node["output"]
    assert (
        f"reboot pending: nvidia-driver: nvidia {OLD_UP} loaded, {NEW_UP} installed "
        f"(markers /var/run/reboot-required.gpuboot-nvidia-driver)" in node["output"]
    )


def test_with_permission_the_node_reboots_once_and_comes_back_verified(lab):
    before = boots(lab)
    node = install(lab, "--allow-reboot")
    # Only the reboot changed something: the upgrade itself happened in the run before.
    assert node["changes"] == [REBOOT_TASK]
    after = boots(lab)
    assert after["boot_count"] == before["boot_count"] + 1
    assert after["podman_restarts"] == before["podman_restarts"] + 1
    assert after["started_at"] != before["started_at"]
    assert after["pid1_start"] != before["pid1_start"]
    assert reboot_markers(lab) == []
    assert NEW_UP in loaded_driver(lab)
    assert "REBOOT-021 | AUDIT | Check the reboot cleared every request" in node["output"]
    assert f"NVIDIA {NEW_UP} loaded after the reboot" in node["output"]  # REBOOT-023 passed


def test_a_second_run_with_permission_does_not_reboot_again(lab):
    before = boots(lab)
    node = install(lab, "--allow-reboot")
    assert node["changed"] == 0, node["changes"]
    assert boots(lab) == before


def test_a_wrong_driver_after_the_reboot_fails_the_node(lab):
    """The check after the reboot is real: a node that comes back with another module than
    the pinned one (the old one, kept across the reboot by a fault) fails the install."""
    labmod.emulator_ctl(
        lab.name, "node1", "fault", "add", "driver-mismatch", OLD_UP, "--survive-reboot"
    )
    # One read of the version file is enough here: the emulated modules load before sshd.
    set_var(lab, "gpuboot_reboot_verify_retries", 1)
    try:
        before = boots(lab)
        node = install(lab, "--allow-reboot", rc=1)
        assert node["status"] == "failed", node
        assert REBOOT_TASK in node["changes"]  # it did reboot, once
        assert boots(lab)["boot_count"] == before["boot_count"] + 1
        assert node["failed_task"] == VERIFY_TASK
        assert f"the pinned NVIDIA driver {NEW_UP} is not loaded" in node["reason"]
        assert f"Kernel Module {OLD_UP}" in node["reason"]
    finally:
        labmod.emulator_ctl(lab.name, "node1", "fault", "clear")
    assert NEW_UP in loaded_driver(lab)  # the fault was all that kept the old module
