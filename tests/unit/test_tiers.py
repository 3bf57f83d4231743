"""The pure tier's guard (tests/tiers.py): an unmarked test that starts a process fails
and names the marker; the same test marked `subprocess` runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # runs pytest itself

CASES = """\
import subprocess

import pytest


def test_unmarked_starts_a_process():
    subprocess.run(["true"], check=True)


@pytest.mark.subprocess
def test_marked_starts_a_process():
    subprocess.run(["true"], check=True)


def test_unmarked_pure():
    assert sum(range(4)) == 6
"""


def test_an_unmarked_test_that_starts_a_process_fails_and_a_marked_one_runs(tmp_path):
    (tmp_path / "test_cases.py").write_text(CASES)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.tiers", "-p", "no:cacheprovider", "-rA",
         str(tmp_path / "test_cases.py")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "FAILED" in out and "test_unmarked_starts_a_process" in out, out
    assert "mark it `pytest.mark.subprocess`" in out, out
    passed = [line for line in out.splitlines() if line.startswith("PASSED")]
    assert [line.rsplit("::", 1)[1] for line in passed] == [
        "test_marked_starts_a_process",
        "test_unmarked_pure",
    ], out
