"""`gpuboot executor setup`: an inventory with nothing to set up, or a --limit naming no
executor, is bad input (exit 2) before any wheelhouse is built or host touched, naming the
file, the group and the fix."""

from __future__ import annotations

import json

import pytest

from gpuboot.cli.boundary import main
from gpuboot.executor import wheelhouse

GPU = """\
all:
  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4}
  children:
    gpu:
      hosts:
        a1: {ansible_host: 10.1.0.1}
"""
EXECUTORS = """\
    gpuboot_executors:
      hosts:
        ex-a: {ansible_host: 192.168.0.5, gpuboot_executor_domains: [hall-a]}
"""


@pytest.fixture(autouse=True)
def no_wheelhouse(monkeypatch):
    def refuse(*_args, **_kw):
        raise AssertionError("a wheelhouse was built for bad input")

    monkeypatch.setattr(wheelhouse, "ensure", refuse)


def _setup(tmp_path, capsys, text: str, *extra: str) -> tuple[int, dict]:
    inv = tmp_path / "inv.yml"
    inv.write_text(text)
    code = main(["executor", "setup", "-i", str(inv), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_an_inventory_without_executors_is_refused_naming_the_group(tmp_path, capsys):
    code, doc = _setup(tmp_path, capsys, GPU)
    assert code == 2
    assert "no executors" in doc["error"]["message"]
    assert "gpuboot_executors" in doc["error"]["where"]
    assert "gpuboot_executor_domains" in doc["error"]["hint"]


def test_a_limit_naming_no_executor_is_refused_naming_one_that_is(tmp_path, capsys):
    code, doc = _setup(tmp_path, capsys, GPU + EXECUTORS, "--limit", "ex-a,a1")
    assert code == 2
    assert "not an executor: a1" in doc["error"]["message"]
    assert "--limit ex-a" in doc["error"]["hint"]
