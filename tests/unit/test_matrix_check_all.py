"""`gpuboot matrix check` lists every violation (the README promises every broken rule):
a stack file with faults in several sections names each of them, not only the first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuboot.stacks import STACK_DIR
from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def gpuboot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args], capture_output=True, text=True, timeout=60
    )


def _broken(tmp_path: Path) -> Path:
    data = yaml.safe_load((STACK_DIR / "lts-550-cuda12.4.yaml").read_text())
    data["name"] = "not-the-file-name"  # name differs from the file name
    data["driver"]["branch"] = "570"  # driver 550.54.15 is not on branch 570
    data["fabricmanager"]["debian"]["version"] = "550.54.14-1"  # not upstream 550.54.15
    data["dcgm"]["colour"] = "blue"  # unknown key
    path = tmp_path / "broken-stack.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_every_faulty_section_is_listed(tmp_path):
    proc = gpuboot("matrix", "check", str(_broken(tmp_path)), "--json")
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    wheres = [v["where"].split(": ", 1)[1] for v in doc["violations"]]
    assert wheres == [
        "name",
        "driver.version",
        "fabricmanager.debian.version",
        "dcgm.colour",
    ], wheres
    assert all(v["fix"] for v in doc["violations"])
    assert doc["rules_checked"] is False
    text = gpuboot("matrix", "check", str(_broken(tmp_path))).stdout
    assert "not on branch 570" in text and "550.54.14-1" in text and "'colour'" in text
    assert "compatibility rules not checked" in text


def test_a_clean_stack_and_a_rule_breaking_one_are_unchanged(tmp_path):
    assert gpuboot("matrix", "check", "lts-550-cuda12.4").returncode == 0
    fixture = REPO / "tests/unit" / "stacks" / "fixtures" / "many-faults.yaml"
    doc = json.loads(gpuboot("matrix", "check", str(fixture), "--json").stdout)
    assert doc["rules_checked"] is True and len(doc["violations"]) >= 5


def test_an_unreadable_stack_is_still_bad_input(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: [unclosed\n")
    proc = gpuboot("matrix", "check", str(bad), "--json")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(json.loads(proc.stdout)["violations"]) == 1
