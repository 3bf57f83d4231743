"""A skewed executor is refused before any host, naming what differs and the fix: other
versions, or other gpuboot code at the same version."""

from __future__ import annotations

import json
import sys

import pytest

from gpuboot.errors import EXIT_BAD_INPUT, BadInput, RunError
from gpuboot.executor import route
from gpuboot.executor.stream import Executor
from gpuboot.executor.versions import (
    SOURCE,
    check_executor,
    check_skew,
    local_versions,
    source_digest,
)
from gpuboot.inventory import load_inventory

INVENTORY = "/etc/gpuboot/hall a.yml"
LOCAL = {
    "ansible-core": "2.19.14",
    "ansible-runner": "2.4.3",
    "gpuboot": "0.1.0",
    SOURCE: "841f3374b8579b84463cf15c",
}


def test_same_versions_and_code_pass():
    check_skew("exec1", dict(LOCAL), LOCAL, INVENTORY)


def test_skew_is_bad_input_naming_each_package_and_the_setup_command():
    remote = {**LOCAL, "ansible-core": "2.18.1", "gpuboot": "not installed"}
    with pytest.raises(BadInput) as err:
        check_skew("exec1", remote, LOCAL, INVENTORY)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert "ansible-core 2.18.1 there, 2.19.14 here" in err.value.message
    assert "gpuboot not installed there" in err.value.message
    assert "ansible-runner" not in err.value.message
    assert err.value.where == "executor exec1"
    assert err.value.hint == "gpuboot executor setup -i '/etc/gpuboot/hall a.yml' --limit exec1"


def test_other_code_at_the_same_version_is_bad_input_naming_the_setup_command():
    remote = {**LOCAL, SOURCE: "0123456789abcdef01234567"}
    with pytest.raises(BadInput) as err:
        check_skew("exec1", remote, LOCAL, INVENTORY)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert "runs other gpuboot code than the controller at the same version 0.1.0" in (
        err.value.message
    )
    assert "0123456789abcdef01234567 there, 841f3374b8579b84463cf15c here" in err.value.message
    assert err.value.where == "executor exec1"
    assert err.value.hint == "gpuboot executor setup -i '/etc/gpuboot/hall a.yml' --limit exec1"


def test_local_versions_name_the_packages_and_the_code():
    found = local_versions()
    assert set(found) == {*LOCAL, "mitogen"}  # mitogen: its version, or "not installed"
    assert len(found[SOURCE]) == 24 and int(found[SOURCE], 16) >= 0


def _tree(root):
    (root / "ansible/roles/r/files").mkdir(parents=True)
    (root / "ansible/roles/r/files/gpuboot-tool").write_text("#!/bin/sh\n")
    (root / "cli").mkdir()
    (root / "cli/verb.py").write_text("X = 1\n")
    (root / "stacks.yml").write_text("a: 1\n")
    return root


@pytest.mark.parametrize(
    "change",
    ["cli/verb.py", "stacks.yml", "ansible/roles/r/files/gpuboot-tool", "cli/new.py"],
)
def test_a_change_to_a_shipped_file_changes_the_digest(tmp_path, change):
    root = _tree(tmp_path)
    before = source_digest(root)
    with (root / change).open("a") as f:
        f.write("# changed\n")
    assert source_digest(root) != before


def test_a_renamed_file_changes_the_digest(tmp_path):
    root = _tree(tmp_path)
    before = source_digest(root)
    (root / "cli/verb.py").rename(root / "cli/verb2.py")
    assert source_digest(root) != before


@pytest.mark.parametrize(
    "added",
    [
        "cli/__pycache__/verb.cpython-311.pyc",
        "ansible/roles/r/__pycache__/x.pyc",
        "notes.txt",
        "ansible/roles/r/files/.gpuboot-tool.swp",
        "ansible/.ansible/collections/x.py",
    ],
)
def test_what_the_wheel_does_not_carry_leaves_the_digest_alone(tmp_path, added):
    root = _tree(tmp_path)
    before = source_digest(root)
    (root / added).parent.mkdir(parents=True, exist_ok=True)
    (root / added).write_bytes(b"\x00built")
    assert source_digest(root) == before


@pytest.mark.subprocess
def test_the_supervisor_reports_the_controllers_own_versions_and_code():
    local = Executor("local", (sys.executable, "-m", "gpuboot.executor.supervisor"))
    check_executor(local, INVENTORY, local_versions())


@pytest.mark.subprocess
def test_a_skewed_executor_is_refused_by_what_it_reports():
    skewed = json.dumps({**local_versions(), "ansible-runner": "2.3.6"})
    executor = Executor("old", (sys.executable, "-c", f"print({skewed!r})"))
    with pytest.raises(BadInput, match=r"ansible-runner 2\.3\.6 there"):
        check_executor(executor, INVENTORY, local_versions())


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "reported",
    [{SOURCE: "0123456789abcdef01234567"}, {SOURCE: None}],
    ids=["other-digest", "no-digest"],
)
def test_an_executor_on_other_code_at_the_same_versions_is_refused(reported):
    said = {**local_versions(), **reported}
    said = json.dumps({k: v for k, v in said.items() if v is not None})
    executor = Executor("stale", (sys.executable, "-c", f"print({said!r})"))
    with pytest.raises(BadInput, match="executor stale runs other gpuboot code") as err:
        check_executor(executor, INVENTORY, local_versions())
    assert err.value.hint == "gpuboot executor setup -i '/etc/gpuboot/hall a.yml' --limit stale"


@pytest.mark.subprocess
def test_the_preflight_names_the_inventory_in_the_setup_command(tmp_path, monkeypatch):
    path = tmp_path / "hall b.yml"
    path.write_text(
        "all:\n  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4}\n"
        "  children:\n    gpu:\n      hosts:\n"
        "        b1: {ansible_host: 10.2.0.1, gpuboot_domain: hall-b}\n"
        "    gpuboot_executors:\n      hosts:\n"
        "        ex-b: {ansible_host: 192.168.0.6, gpuboot_executor_domains: [hall-b]}\n"
    )
    said = json.dumps({**local_versions(), SOURCE: "0123456789abcdef01234567"})
    stale = Executor("ex-b", (sys.executable, "-c", f"print({said!r})"))
    monkeypatch.setattr(route, "executor", lambda _inv, _name: stale)
    with pytest.raises(BadInput, match="executor ex-b runs other gpuboot code") as err:
        route.preflight(load_inventory(path), ["ex-b"])
    assert err.value.hint == f"gpuboot executor setup -i '{path}' --limit ex-b"


@pytest.mark.subprocess
def test_an_executor_that_cannot_answer_is_a_harness_error_not_bad_input():
    executor = Executor("mute", (sys.executable, "-c", "import sys; sys.exit(255)"))
    with pytest.raises(RunError, match="exit 255"):
        check_executor(executor, INVENTORY, local_versions())


@pytest.mark.parametrize("there", ["not installed", "0.3.50"])
def test_an_executor_without_the_controllers_mitogen_is_refused(there):
    """mitogen installed here (gpuboot[fast]) is the executors' too: a run with --strategy
    mitogen must behave alike on either side."""
    here = {**LOCAL, "mitogen": "0.3.54"}
    with pytest.raises(BadInput, match=f"mitogen {there} there, 0.3.54 here"):
        check_skew("exec1", {**here, "mitogen": there}, here, INVENTORY)
    check_skew("exec1", dict(LOCAL), LOCAL, INVENTORY)  # neither side has it: alike
