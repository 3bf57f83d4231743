"""Which executor runs which host, the ssh argv that reaches it, and the pre-flight."""

from __future__ import annotations

import json
import sys

import pytest

from gpuboot.errors import EXIT_BAD_INPUT, BadInput
from gpuboot.executor import route
from gpuboot.executor.stream import Executor
from gpuboot.executor.versions import local_versions
from gpuboot.inventory import load_inventory

INVENTORY = """\
all:
  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4}
  children:
    gpu:
      hosts:
        a1: {ansible_host: 10.1.0.1, gpuboot_domain: hall-a}
        c1: {ansible_host: 10.0.0.1}
        b1: {ansible_host: 10.2.0.1, gpuboot_domain: hall-b}
        a2: {ansible_host: 10.1.0.2, gpuboot_domain: hall-a}
    gpuboot_executors:
      hosts:
        ex-a:
          ansible_host: 192.168.0.5
          ansible_user: gpuboot
          ansible_port: 2222
          ansible_ssh_private_key_file: /keys/executor
          ansible_ssh_common_args: -o UserKnownHostsFile=/keys/known_hosts
          gpuboot_executor_domains: [hall-a]
          gpuboot_executor_venv: /srv/gpuboot/venv
        ex-a2: {ansible_host: 192.168.0.7, gpuboot_executor_domains: [hall-a]}
        ex-b: {ansible_host: 192.168.0.6, gpuboot_executor_domains: [hall-b]}
"""


@pytest.fixture
def inv(tmp_path):
    path = tmp_path / "inv.yml"
    path.write_text(INVENTORY)
    return load_inventory(path)


def test_hosts_go_to_their_domains_executor_and_the_rest_to_the_controller(inv):
    hosts = ["a1", "c1", "b1", "a2"]
    assert route.routing(inv, hosts) == {"ex-a": ["a1", "a2"], "controller": ["c1"], "ex-b": ["b1"]}
    assert route.candidates(inv, ["a1", "c1"]) == ["ex-a", "ex-a2"]
    assert route.candidates(inv, ["c1"]) == []


def test_a_domain_goes_to_its_first_executor_that_answered(inv):
    answered = {"ex-a2", "ex-b"}
    assert route.routing(inv, ["a1", "b1"], answered) == {"ex-a2": ["a1"], "ex-b": ["b1"]}
    # none of hall-a's answered: its first executor keeps its hosts (reported unknown),
    # never the controller
    assert route.routing(inv, ["a1", "b1"], {"ex-b"}) == {"ex-a": ["a1"], "ex-b": ["b1"]}


def test_the_executor_is_reached_by_an_argv_from_its_inventory_variables(inv):
    executor = route.executor(inv, "ex-a")
    assert executor.name == "ex-a"
    argv = list(executor.argv)
    at = argv.index("--")
    assert argv[at + 1 :] == ["192.168.0.5", "/srv/gpuboot/venv/bin/gpuboot-executor-worker"]
    before = argv[:at]
    for pair in (["-l", "gpuboot"], ["-p", "2222"], ["-i", "/keys/executor"]):
        assert any(before[i : i + 2] == pair for i in range(len(before)))
    assert "UserKnownHostsFile=/keys/known_hosts" in before
    assert route.executor(inv, "ex-b").argv[-1] == "/opt/gpuboot/venv/bin/gpuboot-executor-worker"


def _answering(monkeypatch, answers: dict[str, str | None]) -> None:
    """Executors that answer ``versions`` with a JSON document, or stay mute (None)."""

    def fake(_inv, name):
        doc = answers[name]
        if doc is None:
            return Executor(name, (sys.executable, "-c", "import sys; sys.exit(255)"))
        return Executor(name, (sys.executable, "-c", f"print({doc!r})"))

    monkeypatch.setattr(route, "executor", fake)


@pytest.mark.subprocess
def test_preflight_reports_the_mute_and_passes_the_aligned(inv, monkeypatch):
    _answering(monkeypatch, {"ex-a": json.dumps(local_versions()), "ex-b": None})
    found = route.preflight(inv, ["ex-a", "ex-b"])
    assert found["ex-a"] is None
    assert found["ex-b"] and "did not report its versions" in found["ex-b"]


@pytest.mark.subprocess
def test_preflight_refuses_a_skewed_executor_as_bad_input(inv, monkeypatch):
    skewed = {**local_versions(), "ansible-runner": "2.3.0"}
    _answering(
        monkeypatch,
        {"ex-a": json.dumps(local_versions()), "ex-a2": json.dumps(skewed), "ex-b": None},
    )
    with pytest.raises(BadInput, match="executor ex-a2 runs other versions") as caught:
        route.preflight(inv, ["ex-a", "ex-a2", "ex-b"])
    assert caught.value.exit_code == EXIT_BAD_INPUT
    assert caught.value.hint == f"gpuboot executor setup -i {inv.path} --limit ex-a2"
