"""The ansible.cfg a play runs with: Ansible's result polling (internal_poll_interval, 1 ms
by default, ~2% of a core for the whole play) is set by gpuboot, and an operator's own
Ansible configuration is left to apply."""

from __future__ import annotations

import configparser
from pathlib import Path

import ansible_runner
import pytest

from gpuboot import runner


class FakeRunner:
    """ansible_runner.run that records the environment and finishes the play."""

    def __init__(self):
        self.envvars: dict[str, str] = {}

    def run(self, **kwargs):
        self.envvars = kwargs["envvars"]
        kwargs["event_handler"]({"event": "playbook_on_stats", "event_data": {}})

        class Done:
            rc, status = 0, "successful"

        return Done()


@pytest.fixture
def play(tmp_path, monkeypatch):
    fake = FakeRunner()
    monkeypatch.setattr(ansible_runner, "run", fake.run)
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "operator"))
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    operator_cfgs = (str(tmp_path / "operator" / ".ansible.cfg"),)  # not this machine's /etc
    monkeypatch.setattr(runner, "OPERATOR_CFGS", operator_cfgs, raising=False)
    spec = runner.RunSpec(playbook=tmp_path / "play.yml", inventory=(tmp_path / "inv.yml",))

    def run_once() -> dict[str, str]:
        runner.run(spec)
        return fake.envvars

    return run_once


def test_a_play_polls_its_workers_every_5_ms_not_every_1(play):
    env = play()
    assert "ANSIBLE_CONFIG" in env
    cfg = configparser.ConfigParser()
    assert cfg.read(env["ANSIBLE_CONFIG"]) == [env["ANSIBLE_CONFIG"]]
    assert cfg.getfloat("defaults", "internal_poll_interval") == 0.005
    assert Path(env["ANSIBLE_CONFIG"]).stat().st_mode & 0o077 == 0  # in the private run dir


def test_the_operators_ansible_config_variable_is_left_to_apply(play, monkeypatch, tmp_path):
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "mine.cfg"))
    assert "ANSIBLE_CONFIG" not in play()


def test_the_operators_home_ansible_cfg_is_left_to_apply(play, tmp_path):
    home_cfg = tmp_path / "operator" / ".ansible.cfg"
    home_cfg.parent.mkdir(parents=True)
    home_cfg.write_text("[defaults]\nforks = 3\n")
    assert "ANSIBLE_CONFIG" not in play()
