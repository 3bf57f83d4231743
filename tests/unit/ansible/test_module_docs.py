"""Every module of the gpuboot.node collection documents itself as Ansible reads it:
`ansible-doc` parses its DOCUMENTATION (a prose line with ": " in it is a YAML mapping and
breaks the whole page), and the options it documents are the ones the module accepts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from gpuboot import paths
from tests.unit.ansible.modrun import run_module

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

MODULES_DIR = (
    paths.COLLECTIONS_DIR / "ansible_collections" / "gpuboot" / "node" / "plugins" / "modules"
)
MODULES = sorted(p.stem for p in MODULES_DIR.glob("*.py") if p.stem != "__init__")
# A module whose work is an action plugin of the same name (on the controller) documents it.
ACTIONS_DIR = MODULES_DIR.parent / "action"


def _action_spec(module: str) -> set[str] | None:
    """The action plugin's own options, or None when the module runs on the node."""
    path = ACTIONS_DIR / f"{module}.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"_gpuboot_action_{module}", path)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return set(plugin.ARGUMENT_SPEC)


def _accepted(module: str, required: dict, tmp_path) -> set[str]:
    """The module's own argument spec: AnsibleModule lists it when given an unknown option
    (after the required ones, which it checks first)."""
    (tmp_path / "bin").mkdir()
    msg = run_module(module, tmp_path, {**required, "no_such_option_": 1})["msg"]
    found = re.search(r"Supported parameters include: (.*)\.?$", msg)
    assert found, msg
    return {name.strip(" .") for name in found.group(1).split(",")}


def test_the_collection_has_modules():
    assert {"pinned_packages", "kernel_module", "roce_qos"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_reads_the_module_and_its_options_are_the_accepted_ones(module, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ansible.cli.doc",
            "-t",
            "module",
            "--json",
            f"gpuboot.node.{module}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(paths.COLLECTIONS_DIR)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)[f"gpuboot.node.{module}"]["doc"]
    required = {
        name: ["x"] if opt.get("type") == "list" else "x"
        for name, opt in doc["options"].items()
        if opt.get("required")
    }
    accepted = _action_spec(module)
    if accepted is None:
        accepted = _accepted(module, required, tmp_path)
    assert set(doc["options"]) == accepted
