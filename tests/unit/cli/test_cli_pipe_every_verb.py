"""Every --json verb piped into `head -c1`: no BrokenPipe traceback and the verb's own
exit code, on the success path and on the error path (`gpuboot mirror --json | head`: an
error document written to a closed pipe was a traceback, exit 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuboot import cli
from gpuboot.completion import _subparsers
from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

BUNDLE = REPO / "tests" / "fixtures" / "bundles" / "real-h100-healthy"
MISSING = "/nonexistent/inventory.yml"
# verb -> (argv without --json, the exit code it gives unpiped). A new --json verb needs
# a line here (test_every_json_verb_has_a_case).
CASES = {
    "install": (["install", "-i", MISSING], 2),
    "certify": (["certify", "--gen-key", "{tmp}/key.pem"], 0),
    "cert": (["cert", "keygen", "{tmp}/key.pem"], 0),
    "scan": (["scan", "-i", MISSING], 2),
    "schedule": (["schedule", "-i", MISSING], 2),
    "breaker": (["breaker", "status"], 0),
    "remediate": (["remediate", "-i", MISSING], 2),
    "node": (["node", "explain", "n1"], 0),
    "matrix": (["matrix", "list"], 0),
    "plan": (["plan", "-i", MISSING], 2),
    "mirror": (["mirror", "--stack", "lts-550-cuda12.4"], 0),
    "runs": (["runs", "list"], 0),
    "help": (["help", "install"], 0),
    "evaluate": (["evaluate", "--bundle", str(BUNDLE)], 1),
    "status": (["status"], 0),
    "report": (["report", "trend", "-o", "{tmp}/trend.html"], 0),
    "lab": (["lab", "status"], 0),
}


def _json_verbs() -> list[str]:
    verbs = _subparsers(cli.build_parser()).choices
    return [name for name, sub in verbs.items() if "--json" in sub._option_string_actions]


def test_every_json_verb_has_a_case():
    assert set(_json_verbs()) <= set(CASES), set(_json_verbs()) - set(CASES)


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "GPUBOOT_HOME": str(tmp_path / "home"),
        "GPUBOOT_RUNS": str(tmp_path / "home" / "runs"),
    }


@pytest.mark.parametrize("verb", sorted(CASES))
def test_a_closed_pipe_is_no_traceback(verb, tmp_path):
    argv, code = CASES[verb]
    if verb not in _subparsers(cli.build_parser()).choices:
        pytest.skip(f"{verb} is not a verb of this install")
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--json"]
    # the strict reader: gone before the first byte (every write fails)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuboot.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == code, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    # and as an operator types it
    (tmp_path / "key.pem").unlink(missing_ok=True)
    (tmp_path / "key.pem.pub").unlink(missing_ok=True)
    cmd = " ".join(f"'{a}'" for a in [sys.executable, "-m", "gpuboot.cli", *argv])
    shell = subprocess.run(
        ["bash", "-c", f"{cmd} | head -c1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
    )
    assert shell.stdout.strip() == str(code), shell.stderr
    assert "Traceback" not in shell.stderr and "BrokenPipe" not in shell.stderr
