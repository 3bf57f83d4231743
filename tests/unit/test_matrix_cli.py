"""`gpuboot matrix` and `gpuboot mirror` through the CLI: exit codes and every violation."""

import json
import subprocess
import sys

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FIXTURES = REPO / "tests" / "unit" / "stacks" / "fixtures"


def gpuboot(*args):
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_list_shows_every_shipped_stack_clean():
    proc = gpuboot("matrix", "list", "--json")
    assert proc.returncode == 0
    stacks = {s["stack"]: s for s in json.loads(proc.stdout)["stacks"]}
    assert {"lts-550-cuda12.4", "prod-570-cuda12.8", "new-580-cuda13.0"} <= set(stacks)
    assert all(s["violations"] == 0 for s in stacks.values())


def test_fabric_manager_mismatch_is_refused_with_rule_and_fix():
    proc = gpuboot("matrix", "check", str(FIXTURES / "fm-mismatch.yaml"))
    assert proc.returncode == 2
    assert "CMP-001" in proc.stdout and "550.54.14" in proc.stdout and "550.54.15" in proc.stdout
    assert "fix: set fabricmanager.version to 550.54.15" in proc.stdout


def test_cuda13_with_driver_550_is_refused():
    doc = json.loads(
        gpuboot("matrix", "check", str(FIXTURES / "cuda13-driver550.yaml"), "--json").stdout
    )
    assert [v["rule"] for v in doc["violations"]] == ["CMP-010"]
    assert ">= 580" in doc["violations"][0]["message"]


def test_every_violation_is_listed_once():
    doc = json.loads(
        gpuboot("matrix", "check", str(FIXTURES / "many-faults.yaml"), "--json").stdout
    )
    keys = [(v["rule"], v["where"], v["message"]) for v in doc["violations"]]
    assert len(keys) == len(set(keys)) >= 5


def test_mirror_lists_exact_versions():
    proc = gpuboot("mirror", "--stack", "lts-550-cuda12.4")
    assert proc.returncode == 0
    lines = proc.stdout.split()
    assert "nvidia-driver-550-open=550.54.15-1" in lines
    assert "nvidia-fabricmanager-550=550.54.15-1" in lines
    assert all("=" in line for line in lines)
