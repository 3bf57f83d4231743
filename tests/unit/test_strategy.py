"""install --strategy: Ansible's own (linear) or mitogen's (gpuboot[fast]). An unknown name,
or mitogen when it is not installed, is refused (exit 2) before any host is touched."""

from __future__ import annotations

import sys

import pytest

from gpuboot import cli, runner

INVENTORY = (
    "all:\n  hosts:\n    node1:\n      ansible_host: 192.0.2.10\n"
    "      gpuboot_profile: hgx-h100-sxm-8gpu\n      gpuboot_stack: lts-550-cuda12.4\n"
)


@pytest.fixture()
def inv(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    path = tmp_path / "hosts.yml"
    path.write_text(INVENTORY)

    def no_run(*_a, **_k):
        raise AssertionError("a play started")

    monkeypatch.setattr(runner, "run", no_run)
    return str(path)


def test_mitogen_not_installed_is_refused_before_any_host(inv, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ansible_mitogen", None)  # import fails
    assert cli.main(["install", "-i", inv, "--strategy", "mitogen"]) == 2
    err = capsys.readouterr().err
    assert "mitogen" in err and "gpuboot[fast]" in err


def test_an_unknown_strategy_is_refused_before_any_host(inv, capsys):
    assert cli.main(["install", "-i", inv, "--strategy", "free"]) == 2
    assert "unknown strategy 'free'" in capsys.readouterr().err


def test_mitogen_settings_name_its_strategy_plugins():
    env = runner.ansible_env(runner.paths.home(), "mitogen")
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert env["ANSIBLE_STRATEGY_PLUGINS"].endswith("ansible_mitogen/plugins/strategy")
    assert "ANSIBLE_STRATEGY" not in runner.ansible_env(runner.paths.home())
