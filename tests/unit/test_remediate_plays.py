"""The node-side plays of remediation: every task traceable by its id, no shell line (each
command an argv list, each value an extra var), and the reboot is the install's own role."""

from __future__ import annotations

import re

import pytest
import yaml

from gpuboot.remediate import plays

NAME = re.compile(r"^REMEDIATE-\d{3} \| (AUDIT|PATCH) \| \S")


def _tasks(play: str) -> list[dict]:
    (doc,) = yaml.safe_load(play)
    out = []
    for task in doc["tasks"]:
        out += [task, *task.get("block", []), *task.get("always", [])]
    return out


@pytest.mark.parametrize("play", [plays.RESET_PLAY, plays.REBOOT_PLAY])
def test_every_task_has_an_id_and_no_shell_line(play):
    tasks = _tasks(play)
    assert tasks and all(NAME.match(t["name"]) for t in tasks), [t["name"] for t in tasks]
    assert not [t for t in tasks if "ansible.builtin.shell" in t or "shell" in t]
    commands = [t["ansible.builtin.command"] for t in tasks if "ansible.builtin.command" in t]
    assert all(set(c) == {"argv"} for c in commands)


def test_the_reset_names_its_gpus_through_a_variable_and_restarts_what_it_stopped():
    tasks = {t["name"].split(" |")[0]: t for t in _tasks(plays.RESET_PLAY)}
    reset = tasks["REMEDIATE-005"]["ansible.builtin.command"]["argv"]
    assert reset[:3] == ["nvidia-smi", "-r", "-i"] and "gpuboot_remediate_gpus" in reset[3]
    assert "__gpuboot_stopped" in tasks["REMEDIATE-006"]["loop"]


def test_the_reboot_is_the_install_roles_own_with_a_recorded_request():
    tasks = _tasks(plays.REBOOT_PLAY)
    assert tasks[0]["ansible.builtin.copy"]["dest"].endswith("reboot-required.gpuboot-remediate")
    assert tasks[-1]["ansible.builtin.import_role"] == {"name": "gpuboot_reboot"}
