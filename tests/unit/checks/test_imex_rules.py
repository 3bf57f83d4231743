"""IMX-001 on a converged lab node's real package list (captures/dpkg) with IMEX
added as the lab repository serves it, and on EL's rpm list: the package at exactly the
driver's version, the service active; an unreadable service state is ERROR, never FAIL.
Names and behaviour: tests/fixtures/imex/SOURCES.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext, ProbeFailed
from gpuboot.checks.imex_rules import IMEX_ACTIVE, check_imex

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DPKG = (FIXTURES / "captures" / "dpkg" / "dpkg-query_-W.converged.txt").read_text()
NV_VERSION = (
    (FIXTURES / "evaluate" / "lab-h100-550-quick" / "node1")
    .joinpath("proc_driver_nvidia_version.txt")
    .read_text()
)  # the lab node's loaded driver: 550.54.15
PINS = {"nvidia_imex_enabled": True, "nvidia_driver_version": "550.54.15-1"}


def _evidence(imex: str | None = "nvidia-imex-550\t550.54.15-1\thi \n", state: str = "active"):
    return {
        "dpkg-query_-W.txt": ProbeOutput(DPKG + (imex or ""), "", 0),
        "proc_driver_nvidia_version.txt": ProbeOutput(NV_VERSION, "", 0),
        # systemctl is-active exits 3 when the unit is not active, printing its state
        IMEX_ACTIVE: ProbeOutput(state + "\n", "", 0 if state == "active" else 3),
    }


def _judge(evidence, **hostvars):
    ctx = NodeContext("node1", {"hardware": {}}, {**PINS, **hostvars})
    (finding,) = rules.evaluate(evidence, ctx, only=["IMX-001"])
    return finding


def test_imex_at_the_drivers_version_and_running_passes():
    assert _judge(_evidence()).status == "PASS"


def test_a_failed_finding_names_the_remediation():
    found = _judge(_evidence(state="inactive"))
    assert "gpuboot install --tags IMX-001" in found.action


def test_a_stopped_service_fails_naming_its_state():
    found = _judge(_evidence(state="inactive"))
    assert (found.status, found.reason) == ("FAIL", "nvidia-imex service is inactive")


def test_imex_of_another_driver_release_fails():
    found = _judge(_evidence("nvidia-imex-550\t550.127.08-1\thi \n", state="failed"))
    assert found.status == "FAIL"
    assert found.reason == (
        "nvidia-imex service is failed; nvidia-imex 550.127.08 does not match the loaded "
        "driver 550.54.15"
    )


def test_missing_package_fails():
    found = _judge(_evidence(None, state="inactive"))
    assert "no nvidia-imex package installed" in found.reason and found.status == "FAIL"


def test_the_pin_judges_when_no_driver_is_loaded():
    ev = _evidence()
    ev["proc_driver_nvidia_version.txt"] = ProbeOutput("", "cat: No such file\n", 1)
    found = _judge(ev, nvidia_driver_version="550.144.03-1")
    assert found.reason == "nvidia-imex 550.54.15, pinned driver 550.144.03"


def test_el_rpm_without_the_branch_in_its_name():
    rpm = "nvidia-imex 0 580.82.07 1 x86_64\n"
    ev = {**_evidence(), "rpm_-qa.txt": ProbeOutput(rpm, "", 0)}
    del ev["dpkg-query_-W.txt"]
    ev["proc_driver_nvidia_version.txt"] = ProbeOutput(
        NV_VERSION.replace("550.54.15", "580.82.07"), "", 0
    )
    assert _judge(ev, nvidia_driver_version="3:580.82.07-1.el9").status == "PASS"


def test_not_managed_is_not_applicable():
    found = _judge({}, nvidia_imex_enabled=False)
    assert found.status == "SKIPPED" and not found.applicable


def test_unreadable_service_state_is_error_not_fail():
    ev = _evidence()
    ev[IMEX_ACTIVE] = ProbeOutput("", "Failed to connect to bus\n", 1)
    assert _judge(ev).status == "ERROR"
    with pytest.raises(ProbeFailed, match="no unit state"):
        check_imex({**ev, IMEX_ACTIVE: ProbeOutput("garbage\n", "", 0)}, NodeContext("n", {}, PINS))
