"""Remediation's GPU reset, run for real (ansible-runner, connection local), takes the node's
lease as install does: another controller's live lease stops it at its first task, before
any nvidia-smi, with the holder named and the step held; a free node is reset with the
lease held and given back after. Only the lease file's path is moved into the test's
directory (the plays use the module's default, install's)."""

from __future__ import annotations

import json
import sys
import time

import pytest
import yaml

from gpuboot import paths, runner
from gpuboot.remediate import plays

pytestmark = pytest.mark.subprocess  # runs ansible-playbook

OTHER = "hall-b home ba9876543210"

# the stand-in nvidia-smi: logs its arguments and the lease it ran under
SMI = """#!/bin/sh
echo "$*" >> "{log}"
cat "{lease}" >> "{log}" 2>/dev/null || echo "no lease" >> "{log}"
"""


def _with_lease_at(play: str, path: str) -> str:
    doc = yaml.safe_load(play)

    def move(tasks):
        for task in tasks:
            if "gpuboot.node.lease" in task:
                task["gpuboot.node.lease"]["path"] = path
            move(task.get("block", []))
            move(task.get("always", []))

    move(doc[0]["tasks"])
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.fixture
def node(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "home" / "runs"))
    lease, log = tmp_path / "node" / "lease.json", tmp_path / "smi.log"
    lease.parent.mkdir()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text(SMI.format(log=log, lease=lease))
    (bin_ / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{sys.executable.rsplit('/', 1)[0]}:/usr/bin:/bin")
    play = tmp_path / "reset.yml"
    shipped = (paths.PLAYBOOKS_DIR / plays.RESET_PLAYBOOK).read_text()
    play.write_text(_with_lease_at(shipped, str(lease)))
    local = f"{{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}"
    inv = tmp_path / "inv.yml"
    inv.write_text(f"all:\n  hosts:\n    node1: {local}\n")

    def reset():
        spec = runner.RunSpec(
            playbook=play,
            inventory=(inv,),
            label="remediate-reset",
            extravars={"gpuboot_remediate_gpus": ["0000:3b:00.0"], "gpuboot_remediate_daemons": []},
        )
        return runner.run(spec).hosts["node1"]

    return reset, lease, log


def test_another_controllers_lease_stops_the_reset_before_any_gpu_is_touched(node):
    reset, lease, log = node
    held = {"run_id": "20261127T130000-install-abcdef", "controller": OTHER}
    lease.write_text(json.dumps({**held, "taken": time.time(), "expires": time.time() + 600}))
    kept = lease.read_text()
    played = reset()
    assert played.status == "failed" and played.failed_task.startswith("REM-000"), played
    why = plays.refused(played)
    assert why and f"controller {OTHER}" in why and "20261127T130000-install-abcdef" in why
    assert not log.exists()  # nvidia-smi never ran
    assert lease.read_text() == kept  # the holder's lease stands


def test_a_free_node_is_reset_under_the_lease_and_given_back(node):
    reset, lease, log = node
    played = reset()
    assert played.status != "failed" and plays.refused(played) is None, played
    ran = log.read_text()
    assert "-r -i 0000:3b:00.0" in ran
    # every nvidia-smi ran with this run's lease on the node
    assert "no lease" not in ran and '"run_id": "' in ran and "remediate-reset" in ran
    assert not lease.exists()
