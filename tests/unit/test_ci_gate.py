"""CI's order (.ci/run runs the README's `make test`): the pure tier first (seconds), then
the import line, ruff and the linters, then the unit tests that start processes, all with
-x, and only then the lab image and the lab/molecule/browser tier, so a broken change
fails in seconds or minutes, not after an hour."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def test_ci_runs_the_readme_test_command() -> None:
    commands = [
        line.strip()
        for line in (REPO / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert commands[-1] == "make test"
    assert "make test" in (REPO / "README.md").read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_runs_the_gate_before_any_lab() -> None:
    # -n prints every recipe (-B: as on a clean clone, nothing up to date), runs none
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(
        ["make", "-n", "-B", "test"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    ).stdout.splitlines()

    def first(*needles: str) -> int:
        hits = [i for i, line in enumerate(out) if all(n in line for n in needles)]
        assert hits, f"no recipe line with {needles} in:\n" + "\n".join(out)
        return hits[0]

    order = [
        first("pytest", "not lab and not molecule and not browser and not subprocess", "-x"),
        first("scripts/check_imports.py"),
        first("ruff check"),
        first("ansible-lint"),
        first("pytest", "not lab and not molecule and not browser and subprocess", "-x"),
        first("gpuboot lab image"),
        first("pytest", '-m "lab or molecule or browser"'),
    ]
    assert order == sorted(order), "\n".join(out[i] for i in order)
