"""`molecule test -s ROLE` for every per-role scenario: the role alone on a fresh 1-node
lab (after the roles it builds on), idempotence, and the certify rules that judge it as
verifier; then the same verifier fails once the role's work is undone on the node."""

from __future__ import annotations

from itertools import chain

import pytest
import yaml
from integration.conftest import ssh_ok

from gpuboot.checks.rules import RULES
from gpuboot.mig import layout_vars
from gpuboot.profiles import load_profile
from gpuboot.stacks import load_stack, role_vars
from gpuboot_lab import lab as labmod

from .harness import PROJECT, molecule, verifier_summary

pytestmark = pytest.mark.molecule
STACK = "lts-550-cuda12.4"
PROFILE = "hgx-h100-sxm-8gpu"
# Role -> the prefixes of the role variables for what it installs (gpuboot.stacks.role_vars).
COMPONENTS = {
    "doca_ofed": ("doca_ofed",),
    "nvidia_driver": ("nvidia_driver",),
    "nvidia_fabricmanager": ("nvidia_fabricmanager", "nvidia_nscq"),
    "nvidia_peermem": ("nvidia_peermem",),
    "cuda_toolkit": ("cuda_toolkit",),
    "nvidia_gds": ("nvidia_fs",),
    "nvidia_container_toolkit": ("nvidia_container_toolkit",),
    "dcgm": ("dcgm",),
}
# Roles that guard the whole stack rather than install part of it: their node carries
# every pin of the stack.
WHOLE_STACK = {"gpuboot_baseline"}
# Scenario -> a command that undoes part of the role's work, and the rule that must say so.
UNDO = {
    "gpuboot_baseline": ("rm /etc/apt/apt.conf.d/51gpuboot-unattended-upgrades", "STK-003"),
    "doca_ofed": ("apt-mark unhold doca-ofed", "STK-002"),
    "nvidia_driver": ("apt-mark unhold nvidia-utils-550", "STK-002"),
    "nvidia_fabricmanager": ("systemctl stop nvidia-fabricmanager", "FAB-001"),
    "nvidia_peermem": ("modprobe -r nvidia_peermem", "MOD-001"),
    "cuda_toolkit": ("apt-mark unhold cuda-toolkit-12-4", "STK-002"),
    "nvidia_gds": ("modprobe -r nvidia_fs", "MOD-001"),
    "nvidia_container_toolkit": ("apt-mark unhold nvidia-container-toolkit", "STK-002"),
    "dcgm": ("apt-mark unhold datacenter-gpu-manager", "STK-002"),
    "roce_qos": ("mlnx_qos -i enp26s0np0 --trust pcp", "NIC-002"),
    "nvidia_mig": ("nvidia-smi mig -i 0 -dci && nvidia-smi mig -i 0 -dgi", "MIG-001"),
}
# Scenario -> inventory settings of what it configures beyond the stack's pins.
SETTINGS = {
    "nvidia_mig": layout_vars(
        {"instances": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], "gpus": [0, 1]},
        load_profile(PROFILE),
        "tests/molecule: gpuboot_mig",
    ),
}


def role_scenarios() -> dict[str, dict]:
    found = {}
    for path in sorted((PROJECT / "molecule").glob("*/molecule.yml")):
        config = yaml.safe_load(path.read_text())
        if "GPUBOOT_ROLE" in config.get("provisioner", {}).get("env", {}):
            found[path.parent.name] = config
    return found


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


def test_every_role_with_a_scenario_has_an_undo():
    assert set(role_scenarios()) == set(UNDO)


@pytest.mark.parametrize("scenario", sorted(role_scenarios()))
def test_role_scenario(make_lab, tmp_path, scenario):
    config = role_scenarios()[scenario]
    env = config["provisioner"]["env"]
    roles = [*env["GPUBOOT_ROLE_NEEDS"].split(), env["GPUBOOT_ROLE"]]
    rules = config["verifier"]["options"]["k"].split(" or ")
    lab = make_lab(nodes=1, profile=PROFILE, stack=STACK)
    try:
        doc = yaml.safe_load(lab.inventory.read_text())
        pins = role_vars(load_stack(STACK))
        doc["all"]["vars"].update(pins if scenario in WHOLE_STACK else scoped_vars(pins, roles))
        doc["all"]["vars"].update(SETTINGS.get(scenario, {}))
        # The scoped pins stand alone: no stack name for certify to re-apply in full.
        doc["all"]["vars"].pop("gpuboot_stack")
        lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))

        proc = molecule("test", "-s", scenario, inventory=lab.inventory, state=tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
        assert "idempotence] Executed: Successful" in out
        deselected = len(RULES) - len(rules)
        assert verifier_summary(out) == {"passed": len(rules), "deselected": deselected}, out[
            -3000:
        ]

        command, rule = UNDO[scenario]
        ssh_ok(lab, command)
        proc = molecule("verify", "-s", scenario, inventory=lab.inventory, state=tmp_path)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and f"{rule} " in out, out[-3000:]
        failed = {"failed": 1, "passed": len(rules) - 1, "deselected": deselected}
        assert verifier_summary(out) == {k: v for k, v in failed.items() if v}, out[-3000:]
    finally:
        labmod.down(lab.name)
