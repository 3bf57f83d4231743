"""`molecule test -s stack-upgrade` (550 LTS stack, then the 570 stack over it) and
`-s stack-downgrade` (the other way round): idempotence, a reboot, and the certify
checks as verifier against the stack the node ends on."""

from __future__ import annotations

import sys

import pytest
import yaml

from gpuboot.stacks import load_stack, role_vars

from .harness import molecule, verifier_summary

pytestmark = pytest.mark.molecule
LTS, PROD = "lts-550-cuda12.4", "prod-570-cuda12.8"


@pytest.mark.parametrize(
    ("scenario", "from_stack", "to_stack"),
    [("stack-upgrade", LTS, PROD), ("stack-downgrade", PROD, LTS)],
)
def test_stack_change_scenario(make_lab, tmp_path, scenario, from_stack, to_stack):
    lab = make_lab(nodes=1, stack=from_stack)
    # verify judges the node against the stack it was upgraded to. The certify checks
    # read plain host variables (testinfra, no `gpuboot install` overlay), so the new
    # stack's role variables go into the inventory itself, as driver pins.
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["all"]["vars"].update(role_vars(load_stack(to_stack)))
    doc["all"]["vars"].pop("gpuboot_stack")
    lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    files = {}
    for key, stack in (("GPUBOOT_STACK_FROM", from_stack), ("GPUBOOT_STACK_TO", to_stack)):
        path = tmp_path / f"{stack}.yml"
        path.write_text(yaml.safe_dump(role_vars(load_stack(stack))))
        files[key] = str(path)
    env = {**files, "GPUBOOT_MOLECULE_LAB": lab.name, "GPUBOOT_PYTHON": sys.executable}
    state = tmp_path / "molecule"
    proc = molecule("test", "-s", scenario, inventory=lab.inventory, state=state, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "idempotence] Executed: Successful" in out
    summary = verifier_summary(out)
    assert int(summary.get("passed", 0)) >= 20 and set(summary) == {"passed"}, summary
