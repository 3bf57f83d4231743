"""`molecule test -s role` for every role of gpuboot/components.yaml: the role alone on a
fresh 1-node lab (after the roles it builds on), idempotence, and the certify rules that
judge it as verifier; then the same verifier fails once the role's work is undone on the
node. The one scenario takes the role, its prerequisites and its rules from the
environment (GPUBOOT_ROLE, GPUBOOT_ROLE_NEEDS, GPUBOOT_RULES), set here from the table."""

from __future__ import annotations

from itertools import chain

import pytest
import yaml
from integration.conftest import ssh_ok

from gpuboot.checks.rules import RULES
from gpuboot.components import load
from gpuboot.mig import layout_vars
from gpuboot.profiles import load_profile
from gpuboot.stacks import load_stack, role_vars
from gpuboot_lab import lab as labmod

from .harness import molecule, verifier_summary

pytestmark = pytest.mark.molecule
STACK = "lts-550-cuda12.4"
PROFILE = "hgx-h100-sxm-8gpu"
SCENARIO = "role"
TABLE = load()
# Role -> the prefixes of the role variables for what it installs (gpuboot.stacks.role_vars).
COMPONENTS = TABLE.part_prefixes()
# Scenario -> inventory settings of what it configures beyond the stack's pins.
SETTINGS = {
    "nvidia_mig": layout_vars(
        {"instances": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], "gpus": [0, 1]},
        load_profile(PROFILE),
        "tests/molecule: gpuboot_mig",
    ),
}


def scoped_vars(variables: dict, roles: list[str]) -> dict:
    """The stack's role variables with every component outside ``roles`` switched off, so
    the node is judged on what this scenario installs and nothing else."""
    keep = set(chain.from_iterable(COMPONENTS.get(r, ()) for r in roles))
    out = dict(variables)
    for prefix in set(chain.from_iterable(COMPONENTS.values())) - keep:
        for suffix, off in (("_packages", []), ("_enabled", False), ("_version", None)):
            if prefix + suffix in out and prefix + suffix != "nvidia_driver_version":
                out[prefix + suffix] = off
    return out


@pytest.mark.parametrize("role", [r.name for r in TABLE.roles])
def test_role_scenario(make_lab, tmp_path, role):
    entry = TABLE.role(role)
    roles = [*entry.needs, role]
    rules = list(entry.rules)
    env = {
        "GPUBOOT_ROLE": role,
        "GPUBOOT_ROLE_NEEDS": " ".join(entry.needs),
        "GPUBOOT_RULES": " or ".join(rules),
    }
    lab = make_lab(nodes=1, profile=PROFILE, stack=STACK)
    try:
        doc = yaml.safe_load(lab.inventory.read_text())
        pins = role_vars(load_stack(STACK))
        doc["all"]["vars"].update(pins if entry.whole_stack else scoped_vars(pins, roles))
        doc["all"]["vars"].update(SETTINGS.get(role, {}))
        # The scoped pins stand alone: no stack name for certify to re-apply in full.
        doc["all"]["vars"].pop("gpuboot_stack")
        lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))

        proc = molecule("test", "-s", SCENARIO, inventory=lab.inventory, state=tmp_path, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        assert "idempotence] Executed: Successful" in out
        deselected = len(RULES) - len(rules)
        assert verifier_summary(out) == {"passed": len(rules), "deselected": deselected}, out[
            -3000:
        ]

        ssh_ok(lab, entry.undo.command)
        proc = molecule("verify", "-s", SCENARIO, inventory=lab.inventory, state=tmp_path, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and f"{entry.undo.fails} " in out, out[-3000:]
        failed = {"failed": 1, "passed": len(rules) - 1, "deselected": deselected}
        assert verifier_summary(out) == {k: v for k, v in failed.items() if v}, out[-3000:]
    finally:
        labmod.down(lab.name)
