"""`gpuboot ... | head`: a reader that leaves early is no error (it was a BrokenPipe
traceback and exit 1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


@pytest.mark.parametrize(
    "argv", [["matrix", "list", "--json"], ["mirror", "--stack", "lts-550-cuda12.4"]]
)
def test_a_reader_that_leaves_early_gets_no_traceback(argv):
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuboot.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # as `head` does once it has its lines: every write now fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
