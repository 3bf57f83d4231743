"""`molecule test -s role` for every role of gpuboot/components.yaml: the role alone on a
fresh mixed 2-node lab, node1 Debian and node2 el9 (one inventory, both nodes molecule
platforms: prepare, converge, idempotence and verify run on both at once), after the roles
it builds on, idempotence, and the certify rules that judge it as verifier, on each node;
then the same verifier fails on both once each node's OS family's undo (apt-mark on one,
versionlock on the other...) took back part of the role's work. The one scenario takes the
role, its prerequisites and its rules from the environment (GPUBOOT_ROLE,
GPUBOOT_ROLE_NEEDS, GPUBOOT_RULES), set here from the table."""

from __future__ import annotations

import re
from itertools import chain
from pathlib import Path

import pytest
import yaml

from gpuboot.checks.rules import RULES
from gpuboot.components import load
from gpuboot.mig import layout_vars
from gpuboot.profiles import load_profile
from gpuboot.stacks import STACK_DIR, Stack, load_stack, role_vars
from gpuboot_lab import lab as labmod
from tests.lab.conftest import ssh_ok

from .harness import molecule, verifier_summary

pytestmark = pytest.mark.molecule
STACK = "lts-550-cuda12.4"
PROFILE = "hgx-h100-sxm-8gpu"
SCENARIO = "role"
OSES = "debian,el9"  # node1 Debian, node2 el9: molecule/role/molecule.yml's two platforms
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
    # two peers (documentation addresses): the role writes its domain's node file
    "nvidia_imex": {"nvidia_imex_nodes": ["192.0.2.11", "192.0.2.12"]},
}


def scoped_vars(variables: dict, roles: list[str]) -> dict:
    """The stack's role variables with every component outside ``roles`` switched off, so
    the node is judged on what this scenario installs and nothing else."""
    keep = set(chain.from_iterable(COMPONENTS.get(r, ()) for r in roles))
    out = dict(variables)
    for prefix in set(chain.from_iterable(COMPONENTS.values())) - keep:
        # EL8/9: the driver's module stream too (STK-002 would look for it enabled)
        for suffix, off in (
            ("_packages", []),
            ("_enabled", False),
            ("_version", None),
            ("_module_stream", ""),
        ):
            if prefix + suffix in out and prefix + suffix != "nvidia_driver_version":
                out[prefix + suffix] = off
    if "nvidia_fabricmanager" not in keep and "nvidia_driver_module_profile" in out:
        # EL: the driver stream's fm profile installs fabric manager and NSCQ: off with them
        out["nvidia_driver_module_profile"] = ""
    return out


def matrix_stack(role: str, tmp_path: Path) -> Stack:
    """STACK with the optional components ``role`` delivers switched on where the file
    leaves them off (IMEX: pinned there, off on the lab's HGX SKUs)."""
    doc = yaml.safe_load((STACK_DIR / f"{STACK}.yaml").read_text())
    for c in TABLE.components:
        if c.role == role and c.optional and isinstance(doc.get(c.name), dict):
            doc[c.name]["enabled"] = True
    path = tmp_path / f"{STACK}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_stack(path)


def pin_nodes(lab: labmod.Lab, role: str, roles: list[str], stack: Stack) -> None:
    """Each node's own OS family's pins as its host variables (scoped to ``roles``
    unless the role guards the whole stack), the role's settings for all."""
    doc = yaml.safe_load(lab.inventory.read_text())
    hosts = doc["all"]["children"]["gpu_nodes"]["hosts"]
    for node in lab.nodes:
        pins = role_vars(stack, node.family)
        # The scoped pins stand alone: no stack name for certify to re-apply in full.
        pins.pop("gpuboot_stack")
        hosts[node.name].update(pins if TABLE.role(role).whole_stack else scoped_vars(pins, roles))
    doc["all"]["vars"].pop("gpuboot_stack")
    doc["all"]["vars"].update(SETTINGS.get(role, {}))
    lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def failed_on(out: str, rule: str) -> set[str]:
    """The hosts whose test of ``rule`` failed in testinfra's short summary."""
    return set(re.findall(rf"^FAILED \S*test_rule\[ansible://(\w+)-{rule}\]", out, re.M))


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
    lab = make_lab(nodes=2, profile=PROFILE, stack=STACK, os=OSES)
    try:
        assert [n.family for n in lab.nodes] == ["debian", "redhat"]
        pin_nodes(lab, role, roles, matrix_stack(role, tmp_path))
        nodes = len(lab.nodes)

        proc = molecule("test", "-s", SCENARIO, inventory=lab.inventory, state=tmp_path, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        assert "idempotence] Executed: Successful" in out
        deselected = len(RULES) - len(rules)
        # every rule of the role judged on both nodes
        assert verifier_summary(out) == {
            "passed": nodes * len(rules),
            "deselected": nodes * deselected,
        }, out[-3000:]

        for node in lab.nodes:
            ssh_ok(lab, entry.undo[node.family].command, node.name)
        proc = molecule("verify", "-s", SCENARIO, inventory=lab.inventory, state=tmp_path, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        for node in lab.nodes:
            assert failed_on(out, entry.undo[node.family].fails) >= {node.name}, out[-3000:]
        failed = {
            "failed": nodes,
            "passed": nodes * (len(rules) - 1),
            "deselected": nodes * deselected,
        }
        assert verifier_summary(out) == {k: v for k, v in failed.items() if v}, out[-3000:]
    finally:
        labmod.down(lab.name)
