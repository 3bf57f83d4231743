"""Remediation's GPU reset for a hall host runs on its domain's executor: a local supervisor
running the shipped remediate-reset.yml on itself (only the play's connection made local
and the lease file moved into the test's directory), with an nvidia-smi stand-in. A lost
executor leaves the step held, never failed: the ladder does not climb on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from gpuboot import certify, paths
from gpuboot.executor import route
from gpuboot.executor.stream import Executor
from gpuboot.inventory import load_inventory
from gpuboot.remediate import ladder, plays
from gpuboot.remediate.steps import Steps
from tests.unit.executor.conftest import REPLAY, python_channel, stream

pytestmark = pytest.mark.subprocess

GPU = "0000:3b:00.0"
INVENTORY = f"""\
all:
  vars: {{gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4,
         ansible_python_interpreter: {sys.executable}}}
  children:
    gpu:
      hosts:
        node1: {{ansible_host: 192.0.2.1, gpuboot_domain: hall-a}}
    gpuboot_executors:
      hosts:
        ex-a: {{ansible_host: 192.168.0.5, gpuboot_executor_domains: [hall-a]}}
"""
SMI = """#!/bin/sh
echo "$*" >> "{log}"
cat "{lease}" >> "{log}" 2>/dev/null || echo "no lease" >> "{log}"
"""


def _on_itself(play: str, lease: Path) -> str:
    """The shipped play run by the executor on itself, its lease file in ``lease``."""
    (doc,) = yaml.safe_load(play)
    doc["connection"] = "local"

    def move(tasks):
        for task in tasks:
            if "gpuboot.node.lease" in task:
                task["gpuboot.node.lease"]["path"] = str(lease)
            move(task.get("block", []))
            move(task.get("always", []))

    move(doc["tasks"])
    return yaml.safe_dump([doc], sort_keys=False)


@pytest.fixture
def hall(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    lease, log = tmp_path / "node" / "lease.json", tmp_path / "smi.log"
    lease.parent.mkdir()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "nvidia-smi").write_text(SMI.format(log=log, lease=lease))
    (bin_ / "nvidia-smi").chmod(0o755)
    plays_dir = tmp_path / "plays"
    plays_dir.mkdir()
    shipped = (paths.PLAYBOOKS_DIR / plays.RESET_PLAYBOOK).read_text()
    (plays_dir / plays.RESET_PLAYBOOK).write_text(_on_itself(shipped, lease))
    inv = tmp_path / "inv.yml"
    inv.write_text(INVENTORY)
    path = f"PATH={bin_}:{Path(sys.executable).parent}:/usr/bin:/bin"
    supervisor = (sys.executable, "-m", "gpuboot.executor.supervisor")
    local = Executor(
        "ex-a",
        ("env", path, *supervisor, "--playbooks-dir", str(plays_dir),
         "--jobs-dir", str(tmp_path / "jobs")),
    )  # fmt: skip
    state = {"inv": load_inventory(str(inv)), "lease": lease, "log": log, "executor": local}
    monkeypatch.setattr(route, "executor", lambda _inv, _name: state["executor"])
    return state


def _steps(hall, tmp_path: Path, fault: ladder.Fault) -> Steps:
    """node1's ladder steps outside a cluster."""
    history = tmp_path / "history.jsonl"
    return Steps(hall["inv"], "node1", "node1", fault, cluster_=None, history=history,
                 certify_timeout_s=1, progress=lambda _m: None)  # fmt: skip


def test_a_hall_hosts_gpu_reset_runs_on_its_executor_under_the_lease(hall):
    played = plays.reset_gpus(hall["inv"], "node1", (GPU,))
    assert played.executor == "ex-a"
    assert played.status in ("ok", "changed") and plays.held(played) is None, played
    ran = hall["log"].read_text()
    assert f"-r -i {GPU}" in ran and "no lease" not in ran  # reset under the lease
    assert not hall["lease"].exists()  # given back


def test_a_lost_executor_holds_the_step_never_fails_it(hall, tmp_path, monkeypatch):
    cut = tmp_path / "cut"
    cut.write_bytes(stream()[:200])  # the worker's first lines, then ssh's 255
    hall["executor"] = python_channel("ex-a", REPLAY, str(cut), "255")
    monkeypatch.setattr(route, "preflight", lambda _inv, names: dict.fromkeys(names))
    played = plays.reset_gpus(hall["inv"], "node1", (GPU,))
    assert played.status == "unknown" and played.executor == "ex-a", played

    def no_certify(*_a, **_k):
        raise AssertionError("a held step is not judged")

    monkeypatch.setattr(certify, "certify", no_certify)
    steps = _steps(hall, tmp_path, ladder.Fault("xid-79", ("XID-001",), gpus=(GPU,)))
    result, detail = steps(ladder.RESET)
    assert result == ladder.HELD, detail
    assert detail.startswith("outcome unknown: executor ex-a: shard lost"), detail
    assert f"gpuboot remediate -i {hall['inv'].path} --limit node1" in detail


def test_an_install_step_its_executor_did_not_finish_is_held(hall, tmp_path, monkeypatch):
    from gpuboot import install
    from gpuboot.runner import HostResult

    lost = HostResult(host="node1", unknown=True, reason="executor ex-a: shard lost: cut")
    result = type("R", (), {"hosts": {"node1": lost}})()
    monkeypatch.setattr(install, "install", lambda *_a, **_k: result)

    def no_certify(*_a, **_k):
        raise AssertionError("a held step is not judged")

    monkeypatch.setattr(certify, "certify", no_certify)
    steps = _steps(hall, tmp_path, ladder.Fault("drift", ("STK-001",), drifted=True))
    assert steps(ladder.REINSTALL) == (
        ladder.HELD,
        "outcome unknown: executor ex-a: shard lost: cut",
    )


def test_a_step_refused_as_bad_input_is_held_never_failed(hall, tmp_path, monkeypatch):
    from gpuboot.errors import BadInput

    def skewed(_inv, _names):
        raise BadInput("executor ex-a runs ansible-core 2.18.0, the controller 2.19.0")

    monkeypatch.setattr(route, "preflight", skewed)
    steps = _steps(hall, tmp_path, ladder.Fault("xid-79", ("XID-001",), gpus=(GPU,)))
    result, detail = steps(ladder.RESET)
    assert result == ladder.HELD and "ansible-core 2.18.0" in detail, detail
    assert not hall["log"].exists()  # no nvidia-smi ran
