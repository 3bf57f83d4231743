"""Compatibility rules: shipped stacks pass, each broken fixture fails with its rule(s)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import pytest

from gpuboot.errors import ConfigError
from gpuboot.stacks import (
    RULES,
    STACK_DIR,
    Package,
    Violation,
    check_stack,
    list_stacks,
    load_stack,
    require_compatible,
)

from .conftest import FIXTURES

Profile = Callable[[str], dict[str, Any]]


def _ids(found: list[Violation]) -> list[str]:
    return [v.rule_id for v in found]


def _volta(profile: Profile) -> dict[str, Any]:
    """A V100-like NVSwitch SKU (compute capability 7.0), built from the A100 profile."""
    p = dict(profile("a100-sxm4-8gpu"))
    p["name"] = "v100-sxm2-8gpu"
    p["hardware"] = {**p["hardware"], "gpu": {**p["hardware"]["gpu"], "compute_cap": "7.0"}}
    return p


# ------------------------------------------------------------------ the rule table
def test_every_rule_has_an_id_statement_and_source() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for rule in RULES:
        assert re.fullmatch(r"(CMP|LAB)-\d{3}", rule.id)
        assert rule.statement.endswith(".") and "\n" not in rule.statement
        assert len(rule.source) > 10


def test_readme_documents_every_rule() -> None:
    readme = (STACK_DIR / "README.md").read_text()
    for rule in RULES:
        assert f"| {rule.id} |" in readme, rule.id


# ------------------------------------------------------------------ shipped stacks
@pytest.mark.parametrize("name", list_stacks())
def test_shipped_stack_passes_on_its_profiles(name: str, profile: Profile) -> None:
    stack = load_stack(name)
    assert check_stack(stack) == []
    for sku in stack.profiles:
        assert check_stack(stack, profile(sku)) == [], sku


def test_nvswitch_stack_refused_on_pcie_and_back(profile: Profile) -> None:
    hgx = check_stack(load_stack("prod-570-cuda12.8"), profile("l40s-pcie-4gpu"))
    assert _ids(hgx) == ["CMP-003"]
    pcie = check_stack(load_stack("prod-570-cuda12.8-pcie"), profile("hgx-h100-sxm-8gpu"))
    assert _ids(pcie) == ["CMP-004"]
    assert "4 NVSwitches" in pcie[0].message


# ------------------------------------------------------------------ broken fixtures
def test_fm_550_54_14_with_driver_550_54_15(profile: Profile) -> None:
    stack = load_stack(FIXTURES / "fm-mismatch.yaml")
    found = check_stack(stack, profile("hgx-h100-sxm-8gpu"))
    assert found == [
        Violation(
            rule_id="CMP-001",
            where=f"{stack.label}: fabricmanager.version",
            message="fabric manager 550.54.14 does not match driver 550.54.15; "
            "nv-fabricmanager refuses to start on a mismatch and the GPUs stay uninitialised",
            fix="set fabricmanager.version to 550.54.15 (and its packages to 550.54.15-<revision>)",
            source=RULES[0].source,
        )
    ]
    assert "Fabric Manager User Guide" in found[0].source
    assert str(found[0]).startswith("CMP-001 tests/unit/stacks/fixtures/fm-mismatch.yaml: ")


def test_cuda_13_with_driver_550(profile: Profile) -> None:
    stack = load_stack(FIXTURES / "cuda13-driver550.yaml")
    found = check_stack(stack, profile("hgx-h100-sxm-8gpu"))
    assert found == [
        Violation(
            rule_id="CMP-010",
            where=f"{stack.label}: driver.version",
            message="CUDA 13.0.2 needs driver >= 580 (CUDA 13.x minor-version compatibility); "
            "driver 550.54.15 cannot run CUDA 13 applications",
            fix="use a driver >= 580, or a CUDA toolkit <= 12.4 that driver 550.54.15 supports",
            source=next(r.source for r in RULES if r.id == "CMP-010"),
        )
    ]
    assert "Minimum Required Driver Version" in found[0].source


def test_gds_with_proprietary_modules(profile: Profile) -> None:
    stack = load_stack(FIXTURES / "gds-proprietary.yaml")
    found = check_stack(stack, profile("hgx-h100-sxm-8gpu"))
    assert _ids(found) == ["CMP-021"]
    assert found[0].where == f"{stack.label}: driver.flavor"
    assert "needs the open GPU kernel modules" in found[0].message
    assert "driver.flavor: open" in found[0].fix


def test_fabric_manager_on_non_nvswitch_profile(profile: Profile) -> None:
    stack = load_stack(FIXTURES / "fm-on-pcie.yaml")
    assert check_stack(stack) == []  # only the SKU makes it wrong
    found = check_stack(stack, profile("l40s-pcie-4gpu"))
    assert _ids(found) == ["CMP-003"]
    assert found[0].where == f"{stack.label}: fabricmanager.enabled"
    assert "l40s-pcie-4gpu has no NVSwitch" in found[0].message
    assert "fabricmanager.enabled: false" in found[0].fix


def test_kernel_doca_does_not_support(profile: Profile) -> None:
    stack = load_stack(FIXTURES / "kernel-unsupported.yaml")
    found = check_stack(stack, profile("hgx-h100-sxm-8gpu"))
    assert _ids(found) == ["CMP-040"]
    assert found[0].where == f"{stack.label}: kernel.debian.release"
    assert "6.11.0-29-generic on ubuntu24.04" in found[0].message
    assert "ubuntu24.04 6.8.0-*" in found[0].fix


def test_all_violations_are_listed_at_once(profile: Profile) -> None:
    stack = load_stack(FIXTURES / "many-faults.yaml")
    found = check_stack(stack, profile("l40s-pcie-4gpu"))
    assert _ids(found) == [
        "CMP-001",
        "CMP-003",
        "CMP-010",
        "CMP-020",
        "CMP-021",
        "CMP-022",
        "CMP-022",
        "CMP-030",
    ]
    assert {v.where.split(": ", 1)[1] for v in found} == {
        "fabricmanager.version",
        "fabricmanager.enabled",
        "driver.version",
        "nvidia_fs.enabled",
        "driver.flavor",
        "nvidia_fs.debian.depends[1]",
        "nvidia_fs.redhat.depends[1]",
        "nvidia_peermem.enabled",
    }
    for v in found:
        assert v.where.startswith(f"{stack.label}: ")
        assert v.fix and v.source


def test_require_compatible_raises_one_error_with_everything() -> None:
    stack = load_stack(FIXTURES / "many-faults.yaml")
    with pytest.raises(ConfigError) as err:
        require_compatible(stack)
    assert "breaks 7 compatibility rule(s)" in err.value.message
    for rule_id in ("CMP-001", "CMP-010", "CMP-020", "CMP-021", "CMP-022", "CMP-030"):
        assert rule_id in err.value.message
    assert err.value.hint and "fabricmanager.version" in err.value.hint
    require_compatible(load_stack("lts-550-cuda12.4"))  # no exception


def test_where_overrides_the_file_label() -> None:
    found = check_stack(load_stack(FIXTURES / "fm-mismatch.yaml"), where="inventory gpu-a")
    assert found[0].where == "inventory gpu-a: fabricmanager.version"


# ------------------------------------------------------------------ single rules
def test_cuda_12_8_on_r550_is_only_minor_compatible() -> None:
    lts = load_stack("lts-550-cuda12.4")
    prod = load_stack("prod-570-cuda12.8")
    no_gds = dataclasses.replace(lts.nvidia_fs, enabled=False)  # its nvidia-gds is 12.4's
    stack = dataclasses.replace(lts, cuda=prod.cuda, nvidia_fs=no_gds)
    found = check_stack(stack)
    assert _ids(found) == ["CMP-011"]
    assert "CUDA 12.8 needs driver >= 570.26" in found[0].message


def test_unknown_cuda_release_is_refused() -> None:
    lts = load_stack("lts-550-cuda12.4")
    cuda = dataclasses.replace(lts.cuda, version="12.7.0")
    found = check_stack(dataclasses.replace(lts, cuda=cuda))
    assert _ids(found) == ["CMP-011", "CMP-022", "CMP-022"]
    assert found[0].message == "no minimum driver is known for CUDA 12.7"


def test_old_architectures(profile: Profile) -> None:
    volta = _volta(profile)
    found = check_stack(load_stack("new-580-cuda13.0"), volta)
    assert _ids(found) == ["CMP-005", "CMP-012"]
    assert "compute capability 7.0" in found[0].message


def test_peermem_without_ofed_and_old_driver() -> None:
    lts = load_stack("lts-550-cuda12.4")
    no_ofed = dataclasses.replace(
        lts,
        doca_ofed=dataclasses.replace(lts.doca_ofed, enabled=False),
        nvidia_fs=dataclasses.replace(lts.nvidia_fs, enabled=False),
    )
    assert _ids(check_stack(no_ofed)) == ["CMP-030"]
    old = dataclasses.replace(lts, driver=dataclasses.replace(lts.driver, branch="460"))
    assert "CMP-031" in _ids(check_stack(old))


def test_driver_package_names_follow_branch_and_flavor() -> None:
    lts = load_stack("lts-550-cuda12.4")
    deb = lts.driver.pins_for("debian")
    wrong = dataclasses.replace(
        deb, depends=(Package("nvidia-dkms-550", deb.version), *deb.depends[1:])
    )
    driver = dataclasses.replace(lts.driver, pins={**lts.driver.pins, "debian": wrong})
    found = check_stack(dataclasses.replace(lts, driver=driver))
    assert _ids(found) == ["CMP-006"]
    assert found[0].where.endswith(": driver.debian")
    assert "nvidia-dkms-550-open" in found[0].fix


def test_fabric_manager_rpm_name_changes_at_r580() -> None:
    new = load_stack("new-580-cuda13.0")
    prod = load_stack("prod-570-cuda12.8")
    # the R570 RPM name on an R580 stack
    rh = dataclasses.replace(
        new.fabricmanager.pins_for("redhat"), package=prod.fabricmanager.pins_for("redhat").package
    )
    fm = dataclasses.replace(new.fabricmanager, pins={**new.fabricmanager.pins, "redhat": rh})
    found = check_stack(dataclasses.replace(new, fabricmanager=fm))
    assert _ids(found) == ["CMP-007"]
    assert found[0].fix == "set fabricmanager.redhat.package: nvidia-fabricmanager"
