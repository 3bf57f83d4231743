"""install.yml checks every role's variables against its argument spec in one looped task
(INST-003) before anything changes (after the read-only converged check), instead of
Ansible's own check per role (a worker per role and node); the roles are entered with
rolespec_validate: false, so a role left out of INST-003's list would not be checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from gpuboot import paths
from gpuboot.runner import ansible_env

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

PLAY = yaml.safe_load((paths.PLAYBOOKS_DIR / "install.yml").read_text())[0]


def _imports() -> list[tuple[str, str]]:
    """(role, entry point) of every import_role of the play, in order."""
    found = []

    def walk(tasks: list[dict]) -> None:
        for task in tasks:
            for part in ("block", "rescue", "always"):  # the roles sit in the lease's block
                walk(task.get(part, []))
            role = task.get("ansible.builtin.import_role")
            if role:
                assert role.get("rolespec_validate") is False, task["name"]
                found.append((role["name"], role.get("tasks_from", "main")))

    for section in ("pre_tasks", "tasks", "post_tasks"):
        walk(PLAY.get(section, []))
    return found


def test_every_imported_role_is_checked_against_its_spec():
    listed = [tuple(entry) for entry in PLAY["vars"]["__install_specs"]]
    assert listed == _imports()
    for role, entry in listed:
        spec = yaml.safe_load((paths.ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
        assert spec["argument_specs"][entry]["options"], (role, entry)


def _play(tmp_path, *extra_vars: str) -> str:
    """install.yml on this machine as a node, with these -e values; the output."""
    env = {**os.environ, **ansible_env(tmp_path), "ANSIBLE_STDOUT_CALLBACK": "default"}
    env.pop("ANSIBLE_CONFIG", None)
    cmd = [
        sys.executable,
        "-m",
        "ansible.cli.playbook",
        "-i",
        "localhost,",
        "-c",
        "local",
        # A play that got past INST-003 would run on this machine: no Python for its modules.
        "-e",
        "ansible_python_interpreter=/nonexistent/python",
        "-e",
        "nvidia_driver_branch=550 nvidia_driver_version=550.54.15-1",
    ]
    for value in extra_vars:
        cmd += ["-e", value]
    cmd.append(str(paths.PLAYBOOKS_DIR / "install.yml"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _tasks(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("TASK [")]


def test_a_bad_role_variable_stops_the_node_before_any_other_task(tmp_path):
    out = _play(tmp_path, "nvidia_gds_enabled=notabool")
    tasks = _tasks(out)
    # only the read-only converged check (no record here: it skips itself) comes first
    assert "INST-003" in tasks[-1], tasks
    assert all("CONV-00" in t for t in tasks[:-1]), tasks
    assert "nvidia_gds (main): argument 'nvidia_gds_enabled' is of type str" in out, out
    assert "failed=1" in out, out


def test_every_broken_variable_of_every_role_is_reported_at_once(tmp_path):
    out = _play(
        tmp_path,
        "nvidia_gds_enabled=notabool",
        '{"roce_qos_pfc_priorities": {"three": 3}, "roce_qos_ecn": "sometimes"}',
    )
    assert "INST-003" in _tasks(out)[-1], out
    for broken in (
        "nvidia_gds (main): argument 'nvidia_gds_enabled' is of type str",
        "roce_qos (main): argument 'roce_qos_pfc_priorities' is of type dict",
        "roce_qos (main): argument 'roce_qos_ecn' is of type str",
    ):
        assert broken in out, (broken, out)


@pytest.mark.parametrize(
    ("template", "valid"), [('{{ "notabool" }}', False), ("{{ 1 == 1 }}", True)]
)
def test_a_templated_variable_is_judged_by_its_value(tmp_path, template, valid):
    out = _play(tmp_path, json.dumps({"nvidia_gds_enabled": template}))
    tasks = _tasks(out)
    at = next(i for i, t in enumerate(tasks) if "INST-003" in t)
    if valid:  # the play went on to the first role, which fails for want of a Python
        assert len(tasks) > at + 1 and "argument_errors" not in out, out
    else:
        assert at == len(tasks) - 1, tasks
        assert "argument 'nvidia_gds_enabled' is of type str" in out, out


@pytest.mark.parametrize(
    ("entry_points", "says"),
    [
        ('[["no_such_role", "main"]]', "no argument spec for role no_such_role (main)"),
        ('[["nvidia_driver", "no_such_entry"]]', "no argument spec for role nvidia_driver"),
        ('[["nvidia_driver"]]', "is not [role, entry]"),
    ],
)
def test_an_entry_point_without_a_spec_fails_the_check_instead_of_passing(
    tmp_path, entry_points, says
):
    play = tmp_path / "check.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - gpuboot.node.role_arguments:\n"
        f"        roles_path: {paths.ROLES_DIR}\n"
        f"        entry_points: {entry_points}\n"
    )
    env = {**os.environ, **ansible_env(tmp_path), "ANSIBLE_STDOUT_CALLBACK": "default"}
    env.pop("ANSIBLE_CONFIG", None)
    cmd = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local"]
    proc = subprocess.run(
        [*cmd, str(play)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and says in out, out


@pytest.mark.parametrize(
    ("spec", "passes"),
    [
        ("argument_specs:\n  main:\n    short_description: no options\n", True),
        ("argument_specs:\n  - main\n", False),
        ("argument_specs: [\n", False),
    ],
)
def test_an_entry_point_without_options_takes_none_and_a_broken_spec_fails(tmp_path, spec, passes):
    (tmp_path / "roles" / "r" / "meta").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "meta" / "argument_specs.yml").write_text(spec)
    play = tmp_path / "check.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - gpuboot.node.role_arguments:\n"
        f"        roles_path: {tmp_path / 'roles'}\n"
        "        entry_points: [[r, main]]\n"
    )
    env = {**os.environ, **ansible_env(tmp_path), "ANSIBLE_STDOUT_CALLBACK": "default"}
    env.pop("ANSIBLE_CONFIG", None)
    cmd = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local"]
    proc = subprocess.run(
        [*cmd, str(play)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    out = proc.stdout + proc.stderr
    if passes:
        assert proc.returncode == 0 and "ok=1" in out and "failed=0" in out, out
    else:
        assert proc.returncode == 2 and "no argument spec for role r (main)" in out, out
