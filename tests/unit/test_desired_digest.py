"""The converged fast path skips a node only when nothing that decides its state changed:
its variables, the playbooks, the roles, and the collection's modules the roles call."""

from __future__ import annotations

import shutil

import pytest

from gpuboot import install, paths
from gpuboot.inventory import load_inventory

INVENTORY = (
    "all:\n  hosts:\n    node1:\n      ansible_host: 192.0.2.10\n"
    "      gpuboot_profile: hgx-h100-sxm-8gpu\n      gpuboot_stack: lts-550-cuda12.4\n"
)


@pytest.fixture()
def ansible_copy(tmp_path, monkeypatch):
    """The shipped Ansible content copied aside, gpuboot pointed at the copy."""
    root = tmp_path / "ansible"
    shutil.copytree(paths.ANSIBLE_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(paths, "ANSIBLE_DIR", root)
    monkeypatch.setattr(paths, "ROLES_DIR", root / "roles")
    monkeypatch.setattr(paths, "PLAYBOOKS_DIR", root / "playbooks")
    monkeypatch.setattr(paths, "COLLECTIONS_DIR", root / "collections")
    return root


def _digest(tmp_path) -> str:
    inv_file = tmp_path / "hosts.yml"
    inv_file.write_text(INVENTORY)
    return install.desired_digests(load_inventory(str(inv_file)), ["node1"])["node1"]


@pytest.mark.parametrize(
    "changed",
    [
        "roles/nvidia_driver/tasks/main.yml",
        "playbooks/install.yml",
        "collections/ansible_collections/gpuboot/node/plugins/modules/pinned_packages.py",
        "collections/ansible_collections/gpuboot/node/plugins/module_utils/dpkg.py",
    ],
)
def test_a_change_to_the_code_a_converge_runs_changes_the_digest(ansible_copy, tmp_path, changed):
    before = _digest(tmp_path)
    target = ansible_copy / changed
    target.write_text(target.read_text() + "\n# changed\n")
    assert _digest(tmp_path) != before


def test_bytecode_caches_do_not_change_the_digest(ansible_copy, tmp_path):
    before = _digest(tmp_path)
    cache = ansible_copy / "collections/ansible_collections/gpuboot/node/plugins/__pycache__"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "x.cpython-311.pyc").write_bytes(b"\0")
    assert _digest(tmp_path) == before
