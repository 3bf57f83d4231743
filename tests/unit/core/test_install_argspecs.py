"""install.yml checks every role's variables against its argument spec in one looped task
(INST-003) before anything changes (after the read-only converged check), instead of
Ansible's own check per role (a worker per role and node); the roles are entered with
rolespec_validate: false, so a role left out of INST-003's list would not be checked."""

from __future__ import annotations

import os
import subprocess
import sys

import yaml

from gpuboot import paths
from gpuboot.runner import ansible_env

PLAY = yaml.safe_load((paths.PLAYBOOKS_DIR / "install.yml").read_text())[0]


def _imports() -> list[tuple[str, str]]:
    """(role, entry point) of every import_role of the play, in order."""
    found = []
    for section in ("pre_tasks", "tasks", "post_tasks"):
        for task in PLAY.get(section, []):
            role = task.get("ansible.builtin.import_role")
            if role:
                assert role.get("rolespec_validate") is False, task["name"]
                found.append((role["name"], role.get("tasks_from", "main")))
    return found


def test_every_imported_role_is_checked_against_its_spec():
    listed = [tuple(entry) for entry in PLAY["vars"]["__install_specs"]]
    assert listed == _imports()
    for role, entry in listed:
        spec = yaml.safe_load((paths.ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
        assert spec["argument_specs"][entry]["options"], (role, entry)


def test_a_bad_role_variable_stops_the_node_before_any_other_task(tmp_path):
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
        "-e",
        "nvidia_gds_enabled=notabool",
        str(paths.PLAYBOOKS_DIR / "install.yml"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    tasks = [line for line in out.splitlines() if line.startswith("TASK [")]
    # only the read-only converged check (no record here: it skips itself) comes first
    assert "INST-003" in tasks[-1], tasks
    assert all("CONV-00" in t for t in tasks[:-1]), tasks
    assert "failed: [localhost] (item=nvidia_gds (main))" in out, out
    assert "argument 'nvidia_gds_enabled' is of type str" in out, out
    assert "failed=1" in out, out
