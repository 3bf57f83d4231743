"""gpuboot.node.systemd_unit, run for real as Ansible runs it on a node, against a fake
systemctl that keeps each unit's is-enabled word: the unit file whole (as managed_file
writes it), systemd reloaded only when the file changed, the unit enabled unless
is-enabled says enabled, and check mode that changes nothing yet says what would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.unit.ansible.modrun import run_module

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

UNIT = "gpuboot-roce-qos.service"
TEXT = "[Unit]\nDescription=gpuboot RoCE QoS\n\n[Install]\nWantedBy=multi-user.target\n"

# is-enabled: the word in state.json, "disabled" for a unit file nobody enabled, and
# systemctl's own error for a unit with no file; enable: fails on a masked unit.
SYSTEMCTL = r"""
import json, os, sys
root = os.environ["FAKE_ROOT"]
with open(os.path.join(root, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\n")
state_file = os.path.join(root, "state.json")
state = json.load(open(state_file)) if os.path.exists(state_file) else {}
verb, name = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
if verb == "is-enabled":
    if name in state:
        print(state[name])
        sys.exit(0 if state[name] in ("enabled", "enabled-runtime") else 1)
    if os.path.exists(os.path.join(root, "units", name)):
        print("disabled")
        sys.exit(1)
    sys.stderr.write(f"Failed to get unit file state for {name}: No such file or directory\n")
    sys.exit(1)
if verb == "enable":
    if state.get(name) == "masked":
        sys.stderr.write(f"Failed to enable unit: Unit file {name} is masked.\n")
        sys.exit(1)
    state[name] = "enabled"
    json.dump(state, open(state_file, "w"))
"""


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / "bin").mkdir()
    (tmp_path / "units").mkdir()
    exe = tmp_path / "bin" / "systemctl"
    exe.write_text(f"#!{sys.executable}\n{SYSTEMCTL}")
    exe.chmod(0o755)
    return tmp_path


def unit(node: Path, check: bool = False, **args) -> dict:
    args = {"name": UNIT, "content": TEXT, "directory": str(node / "units"), **args}
    return run_module("systemd_unit", node, args, check=check, env={"FAKE_ROOT": str(node)})


def calls(node: Path) -> list[list[str]]:
    log = node / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def set_state(node: Path, word: str) -> None:
    (node / "state.json").write_text(json.dumps({UNIT: word}))


def test_a_new_unit_is_written_reloaded_and_enabled_with_both_diffs(node):
    result = unit(node)
    assert result["changed"] and not result.get("failed"), result
    assert (node / "units" / UNIT).read_text() == TEXT
    assert calls(node) == [
        ["is-enabled", UNIT],  # no unit yet: systemctl's error, no word
        ["daemon-reload"],
        ["is-enabled", UNIT],  # the written file: disabled
        ["enable", UNIT],
    ]
    file_diff, enable_diff = result["diff"]
    assert (file_diff["before"], file_diff["after"]) == ("", TEXT)
    assert (enable_diff["before"], enable_diff["after"]) == ("", "enabled\n")
    assert result["enabled_before"] == ""


def test_a_converged_unit_changes_nothing_and_only_asks(node):
    unit(node)
    (node / "calls.jsonl").unlink()
    result = unit(node)
    assert result["changed"] is False and "diff" not in result, result
    assert calls(node) == [["is-enabled", UNIT]]


@pytest.mark.parametrize("word", ["disabled", "enabled-runtime"])
def test_a_unit_not_enabled_for_every_boot_is_enabled_again_without_a_reload(node, word):
    unit(node)
    set_state(node, word)
    (node / "calls.jsonl").unlink()
    result = unit(node)
    assert result["changed"], result
    assert calls(node) == [["is-enabled", UNIT], ["enable", UNIT]]
    assert [d["before"] for d in result["diff"]] == [f"{word}\n"]  # no file diff: same text


def test_a_changed_file_is_rewritten_and_reloaded(node):
    unit(node)
    (node / "units" / UNIT).write_text("[Unit]\nDescription=edited by hand\n")
    (node / "calls.jsonl").unlink()
    result = unit(node)
    assert result["changed"] and (node / "units" / UNIT).read_text() == TEXT
    assert calls(node) == [["is-enabled", UNIT], ["daemon-reload"], ["is-enabled", UNIT]]


def test_check_mode_on_a_new_unit_writes_nothing_only_asks_and_says_so(node):
    result = unit(node, check=True)
    assert result["changed"] and not result.get("failed"), result
    assert not (node / "units" / UNIT).exists()
    assert calls(node) == [["is-enabled", UNIT]]
    assert [d["after"] for d in result["diff"]] == [TEXT, "enabled\n"]


def test_check_mode_on_a_drifted_unit_only_asks(node):
    unit(node)
    (node / "units" / UNIT).write_text("old\n")
    set_state(node, "disabled")
    (node / "calls.jsonl").unlink()
    result = unit(node, check=True)
    assert result["changed"], result
    assert (node / "units" / UNIT).read_text() == "old\n"
    assert calls(node) == [["is-enabled", UNIT]]
    assert json.loads((node / "state.json").read_text()) == {UNIT: "disabled"}


@pytest.mark.parametrize("check", [False, True])
@pytest.mark.parametrize("word", ["masked", "masked-runtime"])
def test_a_masked_unit_fails_in_both_modes_before_anything_is_written(node, word, check):
    unit(node)
    (node / "units" / UNIT).write_text("old\n")
    set_state(node, word)
    (node / "calls.jsonl").unlink()
    result = unit(node, check=check)
    assert result.get("failed") and f"is {word}" in result["msg"], result
    assert f"systemctl unmask {UNIT}" in result["msg"]
    assert (node / "units" / UNIT).read_text() == "old\n"
    assert calls(node) == [["is-enabled", UNIT]]


@pytest.mark.parametrize("name", ["../escape.service", "gpuboot-roce-qos", "a b.service"])
def test_a_name_that_is_not_a_unit_file_name_is_refused_before_anything(node, name):
    result = unit(node, name=name)
    assert result.get("failed") and "is not a unit file name" in result["msg"], result
    assert list((node / "units").iterdir()) == [] and calls(node) == []
    assert not (node / "escape.service").exists()


def test_a_directory_at_the_units_path_is_refused_and_left(node):
    (node / "units" / UNIT).mkdir()
    result = unit(node)
    assert result.get("failed") and "is a directory" in result["msg"], result
    assert calls(node) == []
