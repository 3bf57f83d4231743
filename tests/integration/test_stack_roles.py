"""The whole stack's roles on a 1-node lab: converge a stack, stay put, upgrade, reboot,
downgrade. One lab, tests run in file order (each builds on the node the previous left)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuboot.lab import lab as labmod
from gpuboot.stacks import load_stack, mirror_packages

from .conftest import gpuboot, reboot_markers, ssh_ok

pytestmark = pytest.mark.lab
LTS, PROD = "lts-550-cuda12.4", "prod-570-cuda12.8"
INSTALLED_550 = "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' | grep '^.i' | grep -- -550"


def pinned(stack: str) -> set[str]:
    """Every package the stack pins, the kernel aside (a lab node runs the host's kernel)."""
    s = load_stack(stack)
    kernel = {p.name for p in s.kernel_pins("debian").packages}
    site = {"gpuboot-probes"}  # the lab's site probe package, held by gpuboot_probe_tools
    return {name for name, _ in mirror_packages(s, "debian") if name not in kernel} | site


@pytest.fixture(scope="module")
def lab(make_lab) -> labmod.Lab:
    return make_lab(nodes=1, stack=LTS)


def install(lab, *extra) -> dict:
    proc = gpuboot("install", "-i", str(lab.inventory), "--json", *extra)
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return json.loads(proc.stdout)["hosts"]["node1"]


def use_stack(lab, stack: str) -> None:
    doc = yaml.safe_load(lab.inventory.read_text())
    doc["all"]["vars"]["gpuboot_stack"] = stack
    lab.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))


def plan_changes(lab) -> dict:
    """Items of the plan that are not `keep`, the kernel aside (the lab leaves it alone)."""
    doc = json.loads(gpuboot("plan", "-i", str(lab.inventory), "--json", check_rc=0).stdout)
    (node,) = doc["nodes"]
    return {
        i["package"]: i["action"]
        for i in node["items"]
        if i["action"] != "keep" and not i["package"].startswith("linux-")
    }


def test_check_mode_on_a_fresh_node_fails_nothing_and_changes_nothing(lab):
    result = install(lab, "--check")
    assert result["changed"] > 0
    assert (
        ssh_ok(lab, "dpkg-query -W -f '${Package}\\n' 'nvidia-*' 2>/dev/null || true").strip() == ""
    )


def test_converge_then_nothing_changes(lab):
    first = install(lab)
    assert first["status"] == "changed"
    second = install(lab)
    assert second["changed"] == 0, second
    assert plan_changes(lab) == {}
    assert reboot_markers(lab) == []  # a fresh node loads everything at once


def test_every_pinned_package_is_held_and_pinned(lab):
    holds = set(ssh_ok(lab, "apt-mark showhold").split())
    assert holds == pinned(LTS)
    prefs = ssh_ok(lab, "cat /etc/apt/preferences.d/gpuboot-*")
    for name in pinned(LTS):
        assert f"Package: {name}\n" in prefs
    loaded = ssh_ok(lab, "lsmod")
    for module in ("nvidia_peermem", "nvidia_fs", "mlx5_ib"):
        assert module in loaded
    assert (
        ssh_ok(lab, "systemctl is-active nvidia-fabricmanager nvidia-dcgm openibd").split()
        == ["active"] * 3
    )


def test_unattended_upgrade_changes_no_pinned_package(lab):
    # The lab repository serves newer releases (550.144.03, DCGM 4, ...): nothing may move.
    for cmd in ("apt-get -s upgrade", "apt-get -s dist-upgrade"):
        out = ssh_ok(lab, cmd)
        changes = [line for line in out.splitlines() if line.startswith(("Inst ", "Remv "))]
        moved = {line.split()[1] for line in changes}
        assert not moved & pinned(LTS), f"{cmd}: {sorted(moved & pinned(LTS))}"
    config = ssh_ok(lab, "apt-config dump Unattended-Upgrade::Package-Blacklist")
    for pattern in ("^nvidia-", "^libnvidia-", "^cuda-", "^doca-", "^datacenter-gpu-manager"):
        assert f'"{pattern}"' in config
    has_uu = ssh_ok(lab, "command -v unattended-upgrade || true").strip()
    if has_uu:  # not in the lab image (no Debian archive on lab nodes); real nodes have it
        ssh_ok(lab, "unattended-upgrade --dry-run")
        assert set(ssh_ok(lab, "apt-mark showhold").split()) == pinned(LTS)


def test_upgrade_to_570_then_reboot_loads_it(lab):
    use_stack(lab, PROD)
    assert install(lab)["changed"] > 0
    assert set(ssh_ok(lab, "apt-mark showhold").split()) == pinned(PROD)
    # The old branch is gone, not left behind held.
    assert ssh_ok(lab, INSTALLED_550 + " || true") == ""
    # The 550 kernel modules stay loaded until the node reboots: recorded, not done.
    pending = reboot_markers(lab)
    assert "/run/reboot-required.gpuboot-nvidia-driver" in pending
    assert "/run/reboot-required.gpuboot-fabricmanager" in pending
    labmod.reboot(lab.name, "node1")
    assert reboot_markers(lab) == []
    assert "Driver Version: 570.133.20" in ssh_ok(lab, "nvidia-smi")
    assert "nvidia_peermem" in ssh_ok(lab, "lsmod")  # modules-load.d brought it back
    assert plan_changes(lab) == {}
    assert install(lab)["changed"] == 0


def test_downgrade_back_to_550(lab):
    use_stack(lab, LTS)
    assert install(lab)["changed"] > 0
    assert set(ssh_ok(lab, "apt-mark showhold").split()) == pinned(LTS)
    labmod.reboot(lab.name, "node1")
    assert "Driver Version: 550.54.15" in ssh_ok(lab, "nvidia-smi")
    assert plan_changes(lab) == {}
    assert install(lab)["changed"] == 0
