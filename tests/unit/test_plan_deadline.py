"""`gpuboot plan` with a node that never answers: reported, the others planned, exit 1
(the node used to hold the whole plan, and `install --kubeconfig`, forever)."""

from __future__ import annotations

import threading

from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

from gpuboot import cli, plan, remote, transport
from tests.unit.plan_answer import answer

HUNG = threading.Event()  # never set: the node's answer never comes


class _Host:
    def __init__(self, name: str, answers: bool):
        self.name, self.answers = name, answers
        self.backend = type("B", (), {"get_hostname": lambda _s: name, "NAME": "ssh"})()

    def run(self, command):
        if not self.answers:
            HUNG.wait()
        out = answer("nvidia-driver-550\t550.54.15-1\tii \n")
        return CommandResult(LocalBackend(), 0, command.encode(), out.encode(), b"")


def test_a_node_that_never_answers_is_reported_and_the_others_planned(
    tmp_path, monkeypatch, capsys
):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars:\n    gpuboot_profile: hgx-h100-sxm-8gpu\n"
        '    nvidia_driver_branch: "550"\n    nvidia_driver_version: "550.54.15-1"\n'
        "  hosts:\n    n1:\n    n2:\n"
    )
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(plan, "READ_TIMEOUT_S", 1)
    monkeypatch.setattr(remote, "KILL_GRACE_S", 0.2)
    hosts = {"n1": _Host("n1", answers=False), "n2": _Host("n2", answers=True)}
    monkeypatch.setattr(transport, "connect", lambda name, *_a: hosts[name])
    assert cli.main(["plan", "-i", str(inv)]) == 1
    out = capsys.readouterr().out
    assert "n1: ERROR reading installed packages timed out after 1s" in out
    assert "n2 (driver pin)" in out


def test_a_hosts_own_collection_deadline_is_plans_too(tmp_path, monkeypatch, capsys):
    inv = tmp_path / "inv.yml"
    inv.write_text(
        "all:\n  vars:\n    gpuboot_profile: hgx-h100-sxm-8gpu\n"
        '    nvidia_driver_branch: "550"\n    nvidia_driver_version: "550.54.15-1"\n'
        "  hosts:\n    n1:\n      gpuboot_collect_timeout: 1\n    n2:\n"
    )
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(remote, "KILL_GRACE_S", 0.2)
    hosts = {"n1": _Host("n1", answers=False), "n2": _Host("n2", answers=True)}
    monkeypatch.setattr(transport, "connect", lambda name, *_a: hosts[name])
    assert cli.main(["plan", "-i", str(inv)]) == 1
    assert "n1: ERROR reading installed packages timed out after 1s" in capsys.readouterr().out
    inv.write_text(
        inv.read_text().replace("gpuboot_collect_timeout: 1", "gpuboot_collect_timeout: soon")
    )
    assert cli.main(["plan", "-i", str(inv)]) == 2  # refused before any host
    assert "gpuboot_collect_timeout" in capsys.readouterr().err
