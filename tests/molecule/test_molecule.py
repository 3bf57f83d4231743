"""`molecule test` on a fresh lab: converge, idempotence, and the certify checks as verifier."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .harness import molecule, verifier_summary

pytestmark = pytest.mark.molecule


def test_default_scenario_converges_is_idempotent_and_verifies(make_lab, tmp_path):
    lab = make_lab(nodes=2)  # molecule.yml names node1 and node2 as its platforms
    proc = molecule("test", "-s", "default", inventory=lab.inventory, state=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "idempotence] Executed: Successful" in out
    summary = verifier_summary(out)  # the testinfra verifier: every rule x 2 nodes
    assert int(summary.get("passed", 0)) >= 2 * 20 and set(summary) == {"passed"}, summary

    # The same verifier must fail for the reason its check names.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuboot.cli",
            "lab",
            "fault",
            "--name",
            lab.name,
            "node2",
            "xid",
            "79",
        ],
        check=True,
        capture_output=True,
    )
    proc = molecule("verify", "-s", "default", inventory=lab.inventory, state=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "XID-001" in out and "Xid 79" in out
