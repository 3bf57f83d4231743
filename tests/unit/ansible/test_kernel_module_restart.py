"""kernel_module's restart_unit: a module that only a reboot could swap gets one restart of
the unit that reloads it (doca_ofed's openibd: a restart task and a reboot-record task of
their own before), and a reboot is recorded only when the restart did not bring the installed
version up. Run for real against the fakes of test_pinned_packages_module and a fake
systemctl whose restart loads what the node's state says."""

from __future__ import annotations

import sys

import pytest

from tests.unit.ansible import test_pinned_packages_module as base

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

NEW, OLD = "24.10-1.1.4", "23.10-0.5.5"
# restart: state["restart_loads"] modules come up at their installed (modinfo) version
SYSTEMCTL = r"""
import json, os, sys
root = os.environ["FAKE_ROOT"]
with open(os.path.join(root, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps(["systemctl"] + sys.argv[1:]) + "\n")
state = json.load(open(os.path.join(root, "state.json")))
if state.get("restart_fails"):
    sys.stderr.write("Job for openibd.service failed because the control process exited\n")
    sys.exit(1)
for name in state.get("restart_loads", []):
    mod = os.path.join(root, "sys", "module", name)
    os.makedirs(mod, exist_ok=True)
    open(os.path.join(mod, "version"), "w").write(state["modinfo"][name] + "\n")
"""


@pytest.fixture
def node(tmp_path):
    def make(**extra):
        n = base.Node(tmp_path, {}, modinfo={"mlx5_core": NEW}, **extra)
        exe = n.root / "bin" / "systemctl"
        exe.write_text(f"#!{sys.executable}\n{SYSTEMCTL}")
        exe.chmod(0o755)
        return n

    return make


def kmod(n: base.Node, check: bool = False) -> dict:
    return base.kmod(
        n,
        check=check,
        name="mlx5_core",
        unloaded="reboot",
        restart_unit="openibd",
        reboot_marker=str(n.root / "reboot-required.gpuboot-doca-ofed"),
    )


def marker(n: base.Node):
    return n.root / "reboot-required.gpuboot-doca-ofed"


def test_a_restart_that_loads_the_new_modules_needs_no_reboot(node):
    n = node(restart_loads=["mlx5_core"])
    base.loaded(n, "mlx5_core", OLD)
    result = kmod(n)
    assert result["changed"] and result["action"] == "restart", result
    assert result["reboot_needed"] is False and not marker(n).exists()
    assert n.calls("systemctl") == [["systemctl", "restart", "openibd"]]
    assert n.calls("modprobe") == []  # openibd reloads the stack, not modprobe
    again = kmod(n)
    assert again["changed"] is False and again["action"] == "", again
    assert n.calls("systemctl") == [["systemctl", "restart", "openibd"]]  # no second restart


def test_a_restart_that_leaves_the_old_modules_records_the_reboot(node):
    n = node(restart_loads=[])
    base.loaded(n, "mlx5_core", OLD)
    result = kmod(n)
    assert result["changed"] and result["reboot_needed"] is True, result
    assert marker(n).read_text() == f"mlx5_core {OLD} loaded, {NEW} installed\n"
    assert n.calls("systemctl") == [["systemctl", "restart", "openibd"]]


def test_modules_not_loaded_come_up_with_the_restart(node):
    n = node(restart_loads=["mlx5_core"])
    result = kmod(n)
    assert result["action"] == "restart" and result["reboot_needed"] is False, result
    assert not marker(n).exists()


def test_check_mode_restarts_nothing_and_says_it_would(node):
    n = node(restart_loads=["mlx5_core"])
    base.loaded(n, "mlx5_core", OLD)
    result = kmod(n, check=True)
    assert result["changed"] is True and result["action"] == "restart", result
    assert n.calls("systemctl") == [] and not marker(n).exists()
    assert (n.root / "sys" / "module" / "mlx5_core" / "version").read_text() == OLD + "\n"


def test_a_failed_restart_fails_the_task_naming_the_unit(node):
    n = node(restart_fails=True)
    base.loaded(n, "mlx5_core", OLD)
    result = kmod(n)
    assert result.get("failed") is True, result
    assert "systemctl restart openibd exited 1" in result["msg"]
    assert "control process exited" in result["msg"]
    assert not marker(n).exists()  # no reboot claimed on a restart that did not run


def test_the_loaded_version_is_the_installed_one_no_restart(node):
    n = node(restart_loads=["mlx5_core"])
    base.loaded(n, "mlx5_core", NEW)
    result = kmod(n)
    assert result["changed"] is False and result["action"] == "", result
    assert n.calls("systemctl") == []
