"""The node-side plays of remediation: every task traceable by its id, no shell line (each
command an argv list, each value an extra var), the reboot is the install's own role, and
each play takes the node's lease (install's) before anything else and gives it back in an
always around everything that changes the node."""

from __future__ import annotations

import re

import pytest
import yaml

from gpuboot import locks, paths
from gpuboot.errors import BadInput
from gpuboot.inventory import load_inventory
from gpuboot.remediate import plays

# the shipped playbooks, as the controller and every executor run them
RESET_PLAY = (paths.PLAYBOOKS_DIR / plays.RESET_PLAYBOOK).read_text()
REBOOT_PLAY = (paths.PLAYBOOKS_DIR / plays.REBOOT_PLAYBOOK).read_text()
NAME = re.compile(r"^REM-\d{3} \| (AUDIT|PATCH) \| \S")


def _flat(tasks: list[dict]) -> list[dict]:
    out = []
    for task in tasks:
        out += [task, *_flat(task.get("block", [])), *_flat(task.get("always", []))]
    return out


def _tasks(play: str) -> list[dict]:
    (doc,) = yaml.safe_load(play)
    return _flat(doc["tasks"])


@pytest.mark.parametrize("play", [RESET_PLAY, REBOOT_PLAY])
def test_every_task_has_an_id_and_no_shell_line(play):
    tasks = [t for t in _tasks(play) if "block" not in t]  # blocks are containers: no id
    assert tasks and all(NAME.match(t["name"]) for t in tasks), [t["name"] for t in tasks]
    assert not [t for t in tasks if "ansible.builtin.shell" in t or "shell" in t]
    commands = [t["ansible.builtin.command"] for t in tasks if "ansible.builtin.command" in t]
    assert all(set(c) == {"argv"} for c in commands)


def test_the_reset_names_its_gpus_through_a_variable_and_restarts_what_it_stopped():
    tasks = {t["name"].split(" |")[0]: t for t in _tasks(RESET_PLAY)}
    reset = tasks["REM-005"]["ansible.builtin.command"]["argv"]
    assert reset[:3] == ["nvidia-smi", "-r", "-i"] and "gpuboot_remediate_gpus" in reset[3]
    assert "__gpuboot_stopped" in tasks["REM-006"]["loop"]


def test_the_reboot_is_the_install_roles_own_with_a_recorded_request():
    tasks = _tasks(REBOOT_PLAY)
    (request,) = [t["ansible.builtin.copy"] for t in tasks if "ansible.builtin.copy" in t]
    assert request["dest"].endswith("reboot-required.gpuboot-remediate")
    reboot = [t for t in tasks if "ansible.builtin.import_role" in t]
    assert reboot == [t for t in tasks if t["name"].startswith("REM-012")]
    assert reboot[0]["ansible.builtin.import_role"] == {"name": "gpuboot_reboot"}


@pytest.mark.parametrize("play", [RESET_PLAY, REBOOT_PLAY])
def test_the_node_lease_is_taken_first_and_given_back_around_every_change(play):
    (doc,) = yaml.safe_load(play)
    take, work = doc["tasks"]
    # install's lease: the same module, its default path, the inventory's ttl
    assert take["gpuboot.node.lease"] == {"ttl": "{{ gpuboot_lease_ttl | default(7200) }}"}
    assert take["name"].startswith(plays.LEASE_TASKS)
    (give,) = work["always"]
    assert give["gpuboot.node.lease"] == {"state": "released"}
    inside = _flat(work["block"])
    assert inside and not [t for t in inside if "gpuboot.node.lease" in t]
    assert [t for t in inside if "PATCH" in t["name"]] and "PATCH" not in take["name"]


def test_a_node_another_run_here_holds_is_refused_before_its_play(tmp_path, monkeypatch):
    """An install (or certify) of the node on this controller holds its machine lock: the
    reboot is refused (bad input: the step is held) and no play starts, no run dir is made."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    inv_path = tmp_path / "inv.yml"
    pins = "gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4"
    inv_path.write_text(f"all:\n  hosts:\n    n1: {{ansible_host: 192.0.2.1, {pins}}}\n")
    inv = load_inventory(inv_path)
    monkeypatch.setattr(plays, "_played", lambda *a: pytest.fail("played on a held node"))
    with locks.hold_hosts(inv, ["n1"], "install"), pytest.raises(BadInput, match="n1"):
        plays.reboot(inv, "n1", "xid 79")
