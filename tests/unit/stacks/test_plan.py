"""role_vars, mirror_packages and compare on realistic node states."""

from __future__ import annotations

import pytest
import yaml

from gpuboot.errors import ConfigError
from gpuboot.paths import ROLES_DIR
from gpuboot.stacks import (
    PlanItem,
    Stack,
    compare,
    load_stack,
    mirror_packages,
    needs_reboot,
    restarts,
    role_vars,
)


def _dpkg_query(stack: Stack) -> dict[str, str]:
    """What `dpkg-query -W` prints on a node converged to ``stack`` (plus unrelated packages)."""
    installed = dict(mirror_packages(stack, "debian"))
    installed.update(
        {"openssh-server": "1:9.2p1-2+deb12u3", "linux-image-5.15.0-91-generic": "5.15.0-91.101"}
    )
    return installed


@pytest.fixture(scope="module")
def lts() -> Stack:
    return load_stack("lts-550-cuda12.4")


@pytest.fixture(scope="module")
def prod() -> Stack:
    return load_stack("prod-570-cuda12.8")


# ------------------------------------------------------------------ role_vars
def test_role_vars_debian(lts: Stack) -> None:
    v = role_vars(lts)
    assert v["nvidia_driver_branch"] == "550"
    assert v["nvidia_driver_version"] == "550.54.15-1"
    assert v["nvidia_driver_flavor"] == "open"
    assert v["nvidia_driver_packages"] == [
        "nvidia-driver-550-open=550.54.15-1",
        "nvidia-dkms-550-open=550.54.15-1",
        "nvidia-utils-550=550.54.15-1",
        "nvidia-compute-utils-550=550.54.15-1",
    ]
    assert "nvidia_driver_module_stream" not in v
    assert v["nvidia_fabricmanager_enabled"] is True
    assert v["nvidia_fabricmanager_version"] == "550.54.15-1"
    assert v["nvidia_fabricmanager_package"] == "nvidia-fabricmanager-550"
    assert v["nvidia_nscq_package"] == "libnvidia-nscq-550"
    assert v["cuda_toolkit_package"] == "cuda-toolkit-12-4"
    assert v["cuda_toolkit_version"] == "12.4.1-1"
    assert v["doca_ofed_version"] == "2.9.1-018000"
    assert v["nvidia_fs_version"] == "2.20.5-1"
    assert v["nvidia_fs_packages"] == [
        "nvidia-fs=2.20.5-1",
        "nvidia-fs-dkms=2.20.5-1",
        "nvidia-gds-12-4=12.4.1-1",
    ]
    assert v["nvidia_peermem_enabled"] is True
    assert v["nvidia_container_toolkit_version"] == "1.17.8-1"
    assert v["dcgm_package"] == "datacenter-gpu-manager"
    assert v["dcgm_version"] == "1:3.3.9"
    assert v["kernel_version"] == "5.15.0-119-generic"
    assert v["kernel_hold_method"] == "apt-mark"
    assert "linux-image-generic" in v["kernel_hold_packages"]
    assert "linux-image-5.15.0-119-generic" in v["kernel_hold_packages"]
    # plain data Ansible can take as extra vars
    assert yaml.safe_load(yaml.safe_dump(v)) == v


def test_role_vars_fit_the_driver_role_argument_spec(lts: Stack) -> None:
    spec = yaml.safe_load((ROLES_DIR / "nvidia_driver/meta/argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    v = role_vars(lts)
    for key in ("nvidia_driver_branch", "nvidia_driver_version", "nvidia_driver_flavor"):
        assert options[key]["type"] == "str" and isinstance(v[key], str)
        assert v[key] in options[key].get("choices", [v[key]])


def test_role_vars_redhat() -> None:
    new = load_stack("new-580-cuda13.0")
    v = role_vars(new, "redhat")
    assert v["nvidia_driver_version"] == "3:580.82.07-1.el9"
    assert v["nvidia_driver_module_stream"] == "nvidia-driver:580-open"
    assert "kmod-nvidia-open-dkms-3:580.82.07-1.el9" in v["nvidia_driver_packages"]
    assert v["nvidia_fabricmanager_package"] == "nvidia-fabricmanager"
    assert v["nvidia_fabricmanager_packages"] == ["nvidia-fabricmanager-580.82.07-1"]
    assert v["dcgm_package"] == "datacenter-gpu-manager-4-core"
    assert v["kernel_hold_method"] == "dnf-versionlock"
    assert v["kernel_version"] == "5.14.0-503.11.1.el9_5.x86_64"


def test_role_vars_disabled_components() -> None:
    v = role_vars(load_stack("prod-570-cuda12.8-pcie"))
    assert v["nvidia_fabricmanager_enabled"] is False
    assert v["nvidia_fabricmanager_version"] is None
    assert v["nvidia_nscq_packages"] == []


def test_unknown_os_family(lts: Stack) -> None:
    with pytest.raises(ConfigError) as err:
        role_vars(lts, "suse")
    assert "debian, redhat" in (err.value.hint or "")


# ------------------------------------------------------------------ mirror_packages
def test_mirror_packages_debian(lts: Stack) -> None:
    pkgs = mirror_packages(lts, "debian")
    assert pkgs[0] == ("linux-image-5.15.0-119-generic", "5.15.0-119.129")
    for expected in [
        ("nvidia-driver-550-open", "550.54.15-1"),
        ("nvidia-dkms-550-open", "550.54.15-1"),
        ("nvidia-utils-550", "550.54.15-1"),
        ("nvidia-compute-utils-550", "550.54.15-1"),
        ("nvidia-fabricmanager-550", "550.54.15-1"),
        ("libnvidia-nscq-550", "550.54.15-1"),
        ("cuda-toolkit-12-4", "12.4.1-1"),
        ("doca-ofed", "2.9.1-018000"),
        ("nvidia-fs-dkms", "2.20.5-1"),
        ("nvidia-gds-12-4", "12.4.1-1"),
        ("libnvidia-container1", "1.17.8-1"),
        ("datacenter-gpu-manager", "1:3.3.9"),
    ]:
        assert expected in pkgs
    assert len(pkgs) == len(set(pkgs)) == 20


def test_mirror_packages_skip_disabled_and_follow_family() -> None:
    pcie = mirror_packages(load_stack("prod-570-cuda12.8-pcie"), "debian")
    assert not [n for n, _ in pcie if "fabricmanager" in n or "nscq" in n]
    rh = dict(mirror_packages(load_stack("prod-570-cuda12.8"), "redhat"))
    assert rh["nvidia-fabric-manager"] == "570.133.20-1"
    assert rh["libnvidia-nscq-570"] == "570.133.20-1"
    assert rh["kernel-devel"] == "5.14.0-503.11.1.el9_5"


# ------------------------------------------------------------------ compare
def test_converged_node_keeps_everything(lts: Stack) -> None:
    plan = compare(_dpkg_query(lts), lts, "debian")
    assert len(plan) == 20
    assert {i.action for i in plan} == {"keep"}
    assert not needs_reboot(plan) and restarts(plan) == []
    assert all(i.current == i.desired and i.replaces is None for i in plan)


def test_upgrade_550_to_570(lts: Stack, prod: Stack) -> None:
    plan = {i.package: i for i in compare(_dpkg_query(lts), prod, "debian")}
    assert plan["nvidia-driver-570-open"] == PlanItem(
        package="nvidia-driver-570-open",
        current="550.54.15-1",
        desired="570.133.20-1",
        action="upgrade",
        reboot=True,
        restarts=(),
        replaces="nvidia-driver-550-open",
    )
    assert plan["nvidia-utils-570"].replaces == "nvidia-utils-550"
    fm = plan["nvidia-fabricmanager-570"]
    assert (fm.action, fm.reboot, fm.restarts) == (
        "upgrade",
        False,
        ("nvidia-fabricmanager.service",),
    )
    assert plan["cuda-toolkit-12-8"].action == "upgrade"
    assert plan["cuda-toolkit-12-8"].reboot is False
    ofed = plan["doca-ofed"]
    assert (ofed.current, ofed.action, ofed.reboot) == ("2.9.1-018000", "upgrade", True)
    assert plan["nvidia-fs-dkms"].reboot is True
    dcgm = plan["datacenter-gpu-manager-4-core"]
    assert (dcgm.current, dcgm.replaces, dcgm.action) == (
        "1:3.3.9",
        "datacenter-gpu-manager",
        "upgrade",
    )
    assert dcgm.restarts == ("nvidia-dcgm.service",)
    assert plan["datacenter-gpu-manager-4-cuda12"].action == "install"
    # the 24.04 kernel is new; the 22.04 kernel is what it takes over from
    kernel = plan["linux-image-6.8.0-60-generic"]
    assert (kernel.action, kernel.reboot) == ("upgrade", True)
    assert kernel.replaces == "linux-image-5.15.0-119-generic"  # the newest of the slot
    assert plan["nvidia-container-toolkit"].action == "keep"
    assert needs_reboot(list(plan.values()))


def test_downgrade_570_to_550(lts: Stack, prod: Stack) -> None:
    plan = {i.package: i for i in compare(_dpkg_query(prod), lts, "debian")}
    drv = plan["nvidia-driver-550-open"]
    assert (drv.current, drv.action, drv.replaces, drv.reboot) == (
        "570.133.20-1",
        "downgrade",
        "nvidia-driver-570-open",
        True,
    )
    assert plan["libnvidia-nscq-550"].action == "downgrade"
    assert plan["libnvidia-nscq-550"].restarts == ("nvidia-dcgm.service",)
    assert plan["doca-ofed"].action == "downgrade"
    assert plan["datacenter-gpu-manager"].action == "downgrade"  # 1:4.2.3-1 -> 1:3.3.9
    assert plan["datacenter-gpu-manager"].replaces == "datacenter-gpu-manager-4-core"


def test_patch_upgrade_within_branch(lts: Stack) -> None:
    installed = _dpkg_query(lts)
    for name in ("nvidia-driver-550-open", "nvidia-utils-550", "nvidia-fabricmanager-550"):
        installed[name] = "550.144.03-1"  # an unattended upgrade moved part of the driver
    plan = {i.package: i for i in compare(installed, lts, "debian")}
    assert plan["nvidia-driver-550-open"].action == "downgrade"
    assert plan["nvidia-driver-550-open"].replaces is None
    assert plan["nvidia-dkms-550-open"].action == "keep"
    assert plan["nvidia-fabricmanager-550"].restarts == ("nvidia-fabricmanager.service",)


def test_fresh_node_installs_everything(lts: Stack) -> None:
    plan = compare({"openssh-server": "1:9.2p1-2"}, lts, "debian")
    assert {i.action for i in plan} == {"install"}
    assert all(i.current is None for i in plan)
    assert needs_reboot(plan)
    assert restarts(plan) == ["nvidia-fabricmanager.service", "nvidia-dcgm.service"]


def test_only_dcgm_changed_restarts_without_reboot(lts: Stack) -> None:
    installed = _dpkg_query(lts)
    installed["datacenter-gpu-manager"] = "1:3.3.7"
    plan = compare(installed, lts, "debian")
    changed = [i for i in plan if i.action != "keep"]
    assert [(i.package, i.action) for i in changed] == [("datacenter-gpu-manager", "upgrade")]
    assert not needs_reboot(plan)
    assert restarts(plan) == ["nvidia-dcgm.service"]
    assert str(changed[0]) == (
        "upgrade   datacenter-gpu-manager 1:3.3.7 -> 1:3.3.9 (restart nvidia-dcgm.service)"
    )


def test_redhat_compare_uses_rpm_order() -> None:
    new = load_stack("new-580-cuda13.0")
    prod = load_stack("prod-570-cuda12.8")
    installed = dict(mirror_packages(prod, "redhat"))
    plan = {i.package: i for i in compare(installed, new, "redhat")}
    assert plan["nvidia-driver"].action == "upgrade"
    assert plan["kmod-nvidia-open-dkms"].reboot is True
    # R580 renamed the RPMs: the new names take over from the old ones
    assert plan["nvidia-fabricmanager"].replaces == "nvidia-fabric-manager"
    assert plan["libnvidia-nscq"].replaces == "libnvidia-nscq-570"
    assert plan["kernel"].action == "keep"
