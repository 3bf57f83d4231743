"""The product/lab line for stacks: the lab checks its own stacks (rule LAB-001, in
gpuboot_lab), the product's stack schema and rules know nothing of the lab."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuboot.stacks import RULES, STACK_DIR, Stack, check_stack, list_stacks, load_stack
from gpuboot_lab.stacks import LAB_RULE, check_served

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def _unserved_toolkit(tmp_path: Path) -> Path:
    """lts-550 with a container toolkit release the lab repository does not serve."""
    data: dict[str, Any] = yaml.safe_load((STACK_DIR / "lts-550-cuda12.4.yaml").read_text())
    data["container_toolkit"]["debian"]["version"] = "1.17.9-1"
    data["container_toolkit"]["version"] = "1.17.9"
    data["container_toolkit"]["redhat"]["version"] = "1.17.9-1"
    path = tmp_path / "lts-550-cuda12.4.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_lab_refuses_versions_its_repository_does_not_serve(tmp_path: Path) -> None:
    found = check_served(load_stack(_unserved_toolkit(tmp_path)))
    assert [v.rule_id for v in found] == ["LAB-001"] * 4  # the toolkit and its companions
    assert "nvidia-container-toolkit=1.17.9-1 is not served" in found[0].message
    assert "1.17.8-1" in found[0].fix
    assert found[0].where.endswith(": container_toolkit.debian")


@pytest.mark.parametrize("name", list_stacks())
def test_every_shipped_stack_runs_in_the_lab(name: str) -> None:
    assert check_served(load_stack(name)) == []


def test_the_product_knows_nothing_of_the_lab(tmp_path: Path) -> None:
    assert "lab" not in {f.name for f in dataclasses.fields(Stack)}
    assert LAB_RULE.id not in {r.id for r in RULES}
    # a stack the lab cannot serve is still a good stack for real machines
    assert check_stack(load_stack(_unserved_toolkit(tmp_path))) == []


def test_lab_up_refuses_an_unserved_stack_before_touching_anything(tmp_path: Path) -> None:
    stack = _unserved_toolkit(tmp_path)
    home = tmp_path / "home"
    argv = ["lab", "up", "--name", "x", "--profile", "hgx-h100-sxm-8gpu", "--stack", str(stack)]
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        # no podman on PATH: had the check come late, the error would be another one
        env={**os.environ, "GPUBOOT_HOME": str(home), "PATH": "/nonexistent"},
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    err = json.loads(proc.stdout)["error"]
    assert "LAB-001" in err["message"] and "nvidia-container-toolkit=1.17.9-1" in err["message"]
    assert not (home / "labs").exists()
