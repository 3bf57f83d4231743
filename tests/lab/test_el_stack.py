"""EL nodes, end to end, on one el9 lab node (real dnf 4.14, rpm 4.18, versionlock, module
streams, the lab's signed RPM repository): `gpuboot install` converges the LTS stack with
dnf, certify passes the stack rules, versionlock and the enabled stream are exactly the
stack, a re-run and `dnf -y upgrade` change nothing, and after a drift `install --check
--diff` names the change, changes nothing, and `plan` agrees; then the 570 stack (the
driver's stream switched, a reboot, certify) and back to 550. One lab for every step."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest
import yaml

from gpuboot.evidence.packages import split_nevr
from gpuboot.stacks import load_stack, role_vars
from gpuboot_lab import lab as labmod

from .conftest import gpuboot, reboot_markers, ssh_ok

pytestmark = pytest.mark.lab

LTS, PROD = "lts-550-cuda12.4", "prod-570-cuda12.8"
RPMS = "rpm -qa --qf '%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n' | sort"


@pytest.fixture(scope="module")
def el9() -> labmod.Lab:
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (run `make setup`)")
    name = f"t{os.getpid() % 10000}-els{uuid.uuid4().hex[:4]}"
    try:
        yield labmod.up(name, 1, "hgx-h100-sxm-8gpu", stack=LTS, os_spec="el9")
    finally:
        if name in labmod.names():
            labmod.down(name)


def _install(lab: labmod.Lab, *extra: str) -> dict:
    proc = gpuboot("install", "-i", str(lab.inventory), "--json", *extra)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr}"
    return json.loads(proc.stdout)["hosts"]["node1"]


def _locks(stack: str = LTS) -> set[str]:
    """The versionlock entries the stack's pins make (the kernel aside: the lab's is the
    host's), as dnf writes them (epoch spelt), and the lab's probe package."""
    pins = role_vars(load_stack(stack), "redhat")
    specs = [
        spec
        for key, value in pins.items()
        if key.endswith("_packages") and not key.startswith("kernel")
        for spec in value
    ]
    out = {"gpuboot-probes-0:0.6-1.*"}
    for name, version in map(split_nevr, specs):
        out.add(f"{name}-{version if ':' in version else '0:' + version}.*")
    return out


def test_el9_install_certify_rerun_upgrade_and_check_diff(el9: labmod.Lab) -> None:
    _install(el9)
    proc = gpuboot("certify", "-i", str(el9.inventory), "--json")
    (node,) = json.loads(proc.stdout)["nodes"]
    verdicts = {f["rule"]: f["status"] for f in node["findings"]}
    assert {r: s for r, s in verdicts.items() if s not in ("PASS", "SKIPPED")} == {}, node
    assert proc.returncode == 0 and node["verdict"] == "PASS"
    assert all(verdicts[r] == "PASS" for r in ("STK-001", "STK-002", "STK-003", "FAB-001"))

    locks = set(ssh_ok(el9, "dnf -q --disablerepo='*' versionlock list").split())
    assert locks == _locks()
    streams = ssh_ok(el9, "dnf -q -C module list --enabled")
    assert [line.split()[:3] for line in streams.splitlines() if line.startswith("nvidia-")] == [
        ["nvidia-driver", "550-open", "[e]"]
    ]

    # a second install: the converged record says nothing drifted; --full runs every role
    assert _install(el9)["changed"] == 0
    before = ssh_ok(el9, RPMS)
    ssh_ok(el9, "dnf -y upgrade")
    assert ssh_ok(el9, RPMS) == before  # versionlock held every pin (and the rest is pinned)

    # drift: a pinned package removed behind gpuboot's back
    ssh_ok(el9, "rpm -e --nodeps nvidia-container-toolkit")
    drifted = ssh_ok(el9, RPMS)
    checked = _install(el9, "--check", "--diff")
    assert any(c.startswith("CTK-012") for c in checked["changes"]), checked
    assert ssh_ok(el9, RPMS) == drifted  # --check changed nothing
    plan = json.loads(gpuboot("plan", "-i", str(el9.inventory), "--json", check_rc=0).stdout)
    (planned,) = plan["nodes"]
    assert [(i["package"], i["action"]) for i in planned["items"] if i["action"] != "keep"] == [
        ("nvidia-container-toolkit", "install")
    ]


def _enabled_streams(lab: labmod.Lab) -> list[list[str]]:
    out = ssh_ok(lab, "dnf -q -C module list --enabled")
    return [line.split()[:3] for line in out.splitlines() if line.startswith("nvidia-")]


def test_el9_stack_upgrade_and_downgrade_switch_the_stream(el9: labmod.Lab) -> None:
    for stack, branch, version in ((PROD, "570", "570.133.20"), (LTS, "550", "550.54.15")):
        doc = yaml.safe_load(el9.inventory.read_text())
        doc["all"]["vars"]["gpuboot_stack"] = stack
        el9.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert _install(el9)["changed"] > 0
        assert _enabled_streams(el9) == [["nvidia-driver", f"{branch}-open", "[e]"]]
        locks = set(ssh_ok(el9, "dnf -q --disablerepo='*' versionlock list").split())
        assert locks == _locks(stack), stack
        # the old branch's modules stay loaded until the node reboots: recorded, not done
        assert "/run/reboot-required.gpuboot-nvidia-driver" in reboot_markers(el9)
        labmod.reboot(el9.name, "node1")
        assert f"Driver Version: {version}" in ssh_ok(el9, "nvidia-smi")
        proc = gpuboot("certify", "-i", str(el9.inventory), "--json", "--probes", "none")
        (node,) = json.loads(proc.stdout)["nodes"]
        failing = {f["rule"]: f["reason"] for f in node["findings"] if f["status"] != "PASS"}
        assert node["verdict"] == "PASS", (stack, failing)
        assert _install(el9)["changed"] == 0, stack
