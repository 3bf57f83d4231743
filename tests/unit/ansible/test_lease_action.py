"""gpuboot.node.lease's controller side: the run and the controller it names on the node
are the ones an operator can find (`gpuboot runs list`, the host and its GPUBOOT_HOME)."""

from __future__ import annotations

import importlib.util

from gpuboot import paths

PATH = paths.COLLECTIONS_DIR / "ansible_collections/gpuboot/node/plugins/action/lease.py"


def _plugin():
    spec = importlib.util.spec_from_file_location("_gpuboot_action_lease", PATH)
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    return plugin


def test_the_run_id_is_gpuboots_run_directory_also_from_a_batch():
    plugin = _plugin()
    runs = "/home/op/.local/share/gpuboot/runs"
    whole = {"ANSIBLE_LOCAL_TEMP": f"{runs}/20261127T133000-install-0a1b2c/tmp"}
    batch = {"ANSIBLE_LOCAL_TEMP": f"{runs}/20261127T133000-install-0a1b2c/batch-02/tmp"}
    assert plugin.run_id(whole) == "20261127T133000-install-0a1b2c"
    assert plugin.run_id(batch) == "20261127T133000-install-0a1b2c"
    assert plugin.run_id({}).startswith("ansible-playbook pid ")


def test_two_homes_on_one_machine_are_two_controllers(tmp_path, monkeypatch):
    plugin = _plugin()
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "hall-a"))
    a = plugin.controller()
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "hall-b"))
    b = plugin.controller()
    assert a != b and a.split(" home ")[0] == b.split(" home ")[0]
    assert str(tmp_path) not in a  # a digest names the home, not its path
