"""Domains and executors in the inventory: every refusal is bad input (exit 2) before any
host is touched, naming the file, the host and key, and the fix."""

from __future__ import annotations

import json

import pytest

from gpuboot.errors import EXIT_BAD_INPUT, BadInput
from gpuboot.inventory import load_inventory, select_hosts

GPU = """\
all:
  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4}
  children:
    gpu:
      hosts:
        a1: {ansible_host: 10.1.0.1, gpuboot_domain: hall-a}
        a2: {ansible_host: 10.1.0.2, gpuboot_domain: hall-a}
        b1: {ansible_host: 10.2.0.1, gpuboot_domain: hall-b}
        c1: {ansible_host: 10.0.0.1}
"""
EXECUTORS = """\
    gpuboot_executors:
      hosts:
        ex-a: {ansible_host: 192.168.0.5, gpuboot_executor_domains: [hall-a]}
        ex-b: {ansible_host: 192.168.0.6, gpuboot_executor_domains: [hall-b, hall-c]}
"""


def _load(tmp_path, text: str):
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return load_inventory(path)


def _refused(tmp_path, text: str, limit: str | None = None) -> BadInput:
    with pytest.raises(BadInput) as caught:
        select_hosts(_load(tmp_path, text), limit)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert str(tmp_path / "inv.yml") in caught.value.where
    assert caught.value.hint
    return caught.value


def test_executors_are_never_targets_and_domains_are_read(tmp_path):
    inv = _load(tmp_path, GPU + EXECUTORS)
    assert list(inv.hosts) == ["a1", "a2", "b1", "c1"]
    assert select_hosts(inv, None) == ["a1", "a2", "b1", "c1"]
    assert select_hosts(inv, "all") == ["a1", "a2", "b1", "c1"]
    assert inv.executors["ex-b"].domains == ("hall-b", "hall-c")
    assert inv.executors["ex-a"].worker == "/opt/gpuboot/venv/bin/gpuboot-executor-worker"


def test_a_limit_naming_only_an_executor_selects_nothing(tmp_path):
    err = _refused(tmp_path, GPU + EXECUTORS, "ex-a")
    assert "matches no host" in err.message


def test_a_domain_without_executor_is_refused_for_its_selected_hosts(tmp_path):
    only_a = EXECUTORS.replace("hall-b, hall-c", "hall-c")
    err = _refused(tmp_path, GPU + only_a)
    assert "domain hall-b has no executor" in err.message and "b1" in err.message
    assert err.where.endswith("b1.gpuboot_domain")
    assert "gpuboot_executor_domains: [hall-b]" in err.hint
    # hosts of served domains (and of none) are fine without b1
    assert select_hosts(_load(tmp_path, GPU + only_a), "a1,c1") == ["a1", "c1"]


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        (GPU.replace("hall-b}", "Hall_B}") + EXECUTORS, "b1.gpuboot_domain", "not a domain"),
        (GPU + EXECUTORS.replace("[hall-a]", "hall-a"), "ex-a.gpuboot_executor_domains", "list"),
        (GPU + EXECUTORS.replace("[hall-a]", "[]"), "ex-a.gpuboot_executor_domains", "no "),
        (
            GPU + EXECUTORS.replace("[hall-a]", "['hall a']"),
            "ex-a.gpuboot_executor_domains",
            "not a domain",
        ),
        (
            GPU + EXECUTORS.replace("[hall-a]}", "[hall-a], gpuboot_executor_venv: 'opt/v'}"),
            "ex-a.gpuboot_executor_venv",
            "absolute path",
        ),
        (
            GPU + EXECUTORS.replace("[hall-a]}", "[hall-a], gpuboot_executor_venv: '/v;reboot'}"),
            "ex-a.gpuboot_executor_venv",
            "plain words",
        ),
        (
            GPU + EXECUTORS.replace("[hall-a]}", "[hall-a], gpuboot_executor_venv: /a/../b}"),
            "ex-a.gpuboot_executor_venv",
            "plain words",
        ),
        (
            GPU + EXECUTORS.replace("[hall-a]}", "[hall-a], gpuboot_domain: hall-a}"),
            "ex-a.gpuboot_domain",
            "never both",
        ),
    ],
)
def test_bad_domains_and_executors_are_refused_at_load(tmp_path, text, where, says):
    with pytest.raises(BadInput) as caught:
        _load(tmp_path, text)
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert caught.value.where == f"{tmp_path / 'inv.yml'}: {where}"
    assert says in caught.value.message and caught.value.hint


def test_a_gpu_host_also_listed_as_executor_is_refused(tmp_path):
    both = GPU + EXECUTORS + "        a1: {gpuboot_executor_domains: [hall-a]}\n"
    with pytest.raises(BadInput, match="never both") as caught:
        _load(tmp_path, both)
    assert caught.value.where.endswith("a1.gpuboot_domain")


def test_an_inventory_of_executors_only_is_refused(tmp_path):
    text = "all:\n  children:\n" + EXECUTORS
    with pytest.raises(BadInput, match="no hosts besides its executors"):
        _load(tmp_path, text)


def _with_executor_user(user: str) -> str:
    return GPU + EXECUTORS.replace("[hall-a]}", f"[hall-a], ansible_user: {json.dumps(user)}}}")


def test_a_hostile_executor_user_is_refused_at_load(tmp_path):
    """A line break in the user the controller's ssh logs in as: refused at load, naming the
    executor's key (executor setup writes the login user it reads on the node, never this)."""
    with pytest.raises(BadInput) as caught:
        _load(tmp_path, _with_executor_user("root\nExecStartPre=/bin/sh"))
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert caught.value.where == f"{tmp_path / 'inv.yml'}: ex-a.ansible_user"
    assert "not a user name" in caught.value.message and caught.value.hint
