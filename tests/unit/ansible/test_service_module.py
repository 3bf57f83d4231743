"""gpuboot.node.service, run for real as Ansible runs it on a node, against a fake systemctl
that answers `show` from a state file: a package's unit enabled (unless systemctl counts it
enabled already) and started or restarted, check mode that only reads, and the one check-mode
case the roles used to let pass with their own failed_when (a unit whose package this run
installs) as an argument, not an exception."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.unit.ansible.modrun import run_module

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

SYSTEMCTL = r"""
import json, os, sys
root = os.environ["FAKE_ROOT"]
args = [a for a in sys.argv[1:] if a != "--"]
with open(os.path.join(root, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps(args) + "\n")
state_file = os.path.join(root, "state.json")
state = json.load(open(state_file))
verb, name = args[0], args[-1]
unit = state.get(name)
if verb == "show":
    if unit is None:
        print("LoadState=not-found\nUnitFileState=\nActiveState=inactive")
    else:
        print("\n".join(f"{k}={unit[k]}" for k in ("LoadState", "UnitFileState", "ActiveState")))
    sys.exit(0)
if unit.get("fails") == verb:
    sys.stderr.write(f"Job for {name}.service failed because the control process exited.\n")
    sys.exit(1)
if verb == "enable":
    unit["UnitFileState"] = "enabled"
elif verb in ("start", "restart"):
    unit["ActiveState"] = "active"
json.dump(state, open(state_file, "w"))
"""


@pytest.fixture
def node(tmp_path: Path):
    (tmp_path / "bin").mkdir()
    exe = tmp_path / "bin" / "systemctl"
    exe.write_text(f"#!{sys.executable}\n{SYSTEMCTL}")
    exe.chmod(0o755)

    def make(unit_file: str | None = "disabled", active: str = "inactive", **extra) -> Path:
        units = {}
        if unit_file is not None:
            load = "masked" if unit_file == "masked" else "loaded"
            units["openibd"] = {
                "LoadState": load,
                "UnitFileState": unit_file,
                "ActiveState": active,
                **extra,
            }
        (tmp_path / "state.json").write_text(json.dumps(units))
        return tmp_path

    return make


def service(root: Path, check: bool = False, **args) -> dict:
    args = {"name": "openibd", **args}
    return run_module("service", root, args, check=check, env={"FAKE_ROOT": str(root)})


def calls(root: Path) -> list[list[str]]:
    log = root / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


SHOW = ["show", "--property=LoadState,UnitFileState,ActiveState", "openibd"]


def test_a_disabled_stopped_unit_is_enabled_then_started(node):
    root = node()
    result = service(root)
    assert result["changed"] and result["actions"] == ["enable", "start"], result
    assert calls(root) == [SHOW, ["enable", "openibd"], ["start", "openibd"]]
    assert service(root)["changed"] is False  # converged: the second run only reads


def test_an_enabled_running_unit_is_only_read(node):
    root = node("enabled", "active")
    result = service(root)
    assert result["changed"] is False and result["actions"] == [], result
    assert calls(root) == [SHOW]


@pytest.mark.parametrize("word", ["static", "generated", "enabled-runtime", "indirect"])
def test_what_systemctl_counts_as_enabled_is_not_enabled_again(node, word):
    root = node(word, "inactive")
    assert service(root)["actions"] == ["start"]


def test_restarted_restarts_a_running_unit(node):
    root = node("enabled", "active")
    result = service(root, state="restarted")
    assert result["changed"] and result["actions"] == ["restart"], result
    assert calls(root)[-1] == ["restart", "openibd"]


def test_enabled_only_enables_and_leaves_it_stopped(node):
    root = node("disabled", "inactive")
    assert service(root, state="enabled")["actions"] == ["enable"]
    assert json.loads((root / "state.json").read_text())["openibd"]["ActiveState"] == "inactive"


def test_check_mode_says_what_it_would_do_and_only_reads(node):
    root = node("disabled", "failed")
    result = service(root, check=True)
    assert result["changed"] and result["actions"] == ["enable", "start"], result
    assert calls(root) == [SHOW]


def test_check_mode_passes_a_unit_whose_package_this_run_installs(node):
    root = node(None)
    result = service(root, check=True, provided_now=True)
    assert result["changed"] and result["unit_missing"], result
    assert result["actions"] == ["enable", "start"] and calls(root) == [SHOW]


@pytest.mark.parametrize(("check", "provided_now"), [(True, False), (False, True), (False, False)])
def test_a_missing_unit_fails_unless_check_mode_expects_it(node, check, provided_now):
    root = node(None)
    result = service(root, check=check, provided_now=provided_now)
    assert result.get("failed") and "no unit openibd on the node" in result["msg"], result
    assert calls(root) == [SHOW]


def test_a_masked_unit_fails_and_is_left_masked(node):
    root = node("masked")
    result = service(root)
    assert result.get("failed") and "is masked" in result["msg"], result
    assert calls(root) == [SHOW]


def test_a_start_that_fails_says_systemctls_reason_and_where_to_look(node):
    root = node("enabled", "inactive", fails="start")
    result = service(root)
    assert result.get("failed") and "control process exited" in result["msg"], result
    assert "journalctl -u openibd" in result["hint"]


@pytest.mark.parametrize("name", ["-H", "a b", "../openibd", "x;reboot"])
def test_a_name_that_is_no_unit_name_is_refused_before_any_systemctl(node, name):
    root = node()
    result = service(root, name=name)
    assert result.get("failed") and "is not a systemd unit name" in result["msg"], result
    assert calls(root) == []
