"""Stack files: shipped ones load; every schema fault names the file, the key and the fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuboot.errors import ConfigError
from gpuboot.stacks import KernelPins, Package, list_stacks, load_stack
from gpuboot.stacks.model import PARTS

from .conftest import FIXTURES

SHIPPED = ["lts-550-cuda12.4", "new-580-cuda13.0", "prod-570-cuda12.8", "prod-570-cuda12.8-pcie"]


def test_list_stacks_names_the_shipped_files() -> None:
    assert list_stacks() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_stack_loads(name: str) -> None:
    stack = load_stack(name)
    assert stack.name == name
    assert stack.label == f"gpuboot/stacks/{name}.yaml"
    assert stack.profiles
    assert stack.driver.flavor == "open"
    assert [c.name for c in stack.components()][:2] == ["kernel", "driver"]


def test_lts_stack_values() -> None:
    s = load_stack("lts-550-cuda12.4")
    assert (s.driver.branch, s.driver.version) == ("550", "550.54.15")
    assert s.driver.pins_for("debian").version == "550.54.15-1"
    assert s.driver.pins_for("debian").depends == (
        Package("nvidia-dkms-550-open", "550.54.15-1"),
        Package("nvidia-utils-550", "550.54.15-1"),
        Package("nvidia-compute-utils-550", "550.54.15-1"),
    )
    assert s.driver.pins_for("redhat").module_stream == "nvidia-driver:550-open"
    assert s.fabricmanager.version == s.nscq.version == "550.54.15"
    assert s.cuda.version == "12.4.1" and s.cuda_major_minor == (12, 4)
    assert s.doca_ofed.version == "2.9.1"
    # a depends entry with its own version keeps it
    assert Package("nvidia-gds-12-4", "12.4.1-1") in s.nvidia_fs.pins_for("debian").depends
    assert s.nvidia_peermem.enabled is True
    kernel = s.kernel_pins("debian")
    assert isinstance(kernel, KernelPins)
    assert (kernel.release, kernel.hold) == ("5.15.0-119-generic", "apt-mark")
    assert "linux-generic" in kernel.hold_packages
    assert s.kernel_pins("redhat").hold == "dnf-versionlock"


def test_required_versions_of_the_brief() -> None:
    new = load_stack("new-580-cuda13.0")
    prod = load_stack("prod-570-cuda12.8")
    assert (new.driver.version, new.cuda.version, new.doca_ofed.version) == (
        "580.82.07",
        "13.0.2",
        "3.0.0",
    )
    assert (prod.driver.version, prod.cuda.version) == ("570.133.20", "12.8.1")
    # R580 renamed fabric manager and NSCQ in NVIDIA's RHEL repository
    assert new.fabricmanager.pins_for("redhat").package == "nvidia-fabricmanager"
    assert prod.fabricmanager.pins_for("redhat").package == "nvidia-fabric-manager"


def test_pcie_stack_has_no_fabric_manager() -> None:
    s = load_stack("prod-570-cuda12.8-pcie")
    assert not s.fabricmanager.enabled and not s.nscq.enabled
    assert s.fabricmanager.pins == {}


def test_load_by_path() -> None:
    s = load_stack(FIXTURES / "fm-mismatch.yaml")
    assert s.name == "fm-mismatch"
    assert s.label.endswith("tests/unit/stacks/fixtures/fm-mismatch.yaml")


def test_unknown_stack_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_stack("lts-999")
    assert "no stack named 'lts-999'" in err.value.message
    assert "lts-550-cuda12.4" in (err.value.hint or "")


def _raises(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        load_stack(path)
    assert err.value.hint, "every schema error carries the fix"
    assert err.value.exit_code == 2
    return err.value


def _set(keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *head, last = keys.split(".")
        node = data
        for k in head:
            node = node[k]
        node[last] = value

    return edit


def _delete(keys: str) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        *head, last = keys.split(".")
        node = data
        for k in head:
            node = node[k]
        del node[last]

    return edit


def test_unknown_key(variant: Callable[..., Path]) -> None:
    path = variant("lts-550-cuda12.4", _set("fabricmanager.verison", "550.54.15"))
    err = _raises(path)
    assert err.where == f"{path}: fabricmanager.verison"
    assert "unknown key 'verison'" in err.message
    assert "version" in (err.hint or "")


def test_unknown_top_level_key(variant: Callable[..., Path]) -> None:
    err = _raises(variant("lts-550-cuda12.4", _set("cudnn", {"version": "9.1"})))
    assert err.where and err.where.endswith(": cudnn")


def test_missing_key(variant: Callable[..., Path]) -> None:
    path = variant("lts-550-cuda12.4", _delete("driver.flavor"))
    err = _raises(path)
    assert err.where == f"{path}: driver.flavor"
    assert "missing key 'flavor'" in err.message
    assert err.hint == "add driver.flavor"


def test_missing_os_family(variant: Callable[..., Path]) -> None:
    err = _raises(variant("lts-550-cuda12.4", _delete("dcgm.redhat")))
    assert err.where and err.where.endswith(": dcgm.redhat")


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [
        ("driver.debian.version", "550.54.15_1", "driver.debian.version"),
        ("driver.version", "550.54.x", "driver.version"),
        ("cuda.version", "twelve", "cuda.version"),
        ("kernel.debian.release", "5.15.0", "kernel.debian.release"),
        ("driver.version", "550.54.15-1\n", "driver.version"),  # `$` allows one line break
        ("cuda.version", "12.4\n", "cuda.version"),
        (
            "nvidia_fs.debian.depends",
            ["nvidia-fs-dkms", "nvidia-gds-12-4=12.4.1 1"],
            "nvidia_fs.debian.depends[1]",
        ),
    ],
)
def test_malformed_version(variant: Callable[..., Path], key: str, value: Any, where: str) -> None:
    path = variant("lts-550-cuda12.4", _set(key, value))
    err = _raises(path)
    assert err.where == f"{path}: {where}"
    assert "malformed value" in err.message
    assert "write it like" in (err.hint or "")


def test_unquoted_number_is_refused_with_a_quote_hint(variant: Callable[..., Path]) -> None:
    path = variant("lts-550-cuda12.4", _set("driver.branch", 550))
    err = _raises(path)
    assert err.where == f"{path}: driver.branch"
    assert "must be a string" in err.message
    assert "quote it" in (err.hint or "")


def test_package_version_must_carry_the_component_version(
    variant: Callable[..., Path],
) -> None:
    path = variant("lts-550-cuda12.4", _set("fabricmanager.debian.version", "550.54.14-1"))
    err = _raises(path)
    assert err.where == f"{path}: fabricmanager.debian.version"
    assert "is not upstream version '550.54.15'" in err.message


def test_driver_version_must_be_on_its_branch(variant: Callable[..., Path]) -> None:
    path = variant("lts-550-cuda12.4", _set("driver.branch", "570"))
    err = _raises(path)
    assert err.where == f"{path}: driver.version"
    assert "set driver.branch to '550'" in (err.hint or "")


def test_bad_flavor_and_hold(variant: Callable[..., Path]) -> None:
    err = _raises(variant("lts-550-cuda12.4", _set("driver.flavor", "closed")))
    assert err.where and err.where.endswith(": driver.flavor")
    err = _raises(variant("lts-550-cuda12.4", _set("kernel.debian.hold", "dnf-versionlock")))
    assert err.where and err.where.endswith(": kernel.debian.hold")
    assert err.hint == "use apt-mark"


def test_name_must_match_file(variant: Callable[..., Path]) -> None:
    path = variant("lts-550-cuda12.4", lambda d: None, name="other")
    err = _raises(path)
    assert err.where == f"{path}: name"
    assert "rename the file" in (err.hint or "")


def test_disabled_component_needs_no_packages(variant: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["nvidia_fs"] = {"enabled": False}

    stack = load_stack(variant("lts-550-cuda12.4", edit))
    assert not stack.nvidia_fs.enabled


def test_optional_component_left_out_is_disabled(variant: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        del data["nvidia_fs"], data["nvidia_peermem"]

    stack = load_stack(variant("lts-550-cuda12.4", edit))
    assert not stack.nvidia_fs.enabled and stack.nvidia_fs.pins == {}
    assert not stack.nvidia_peermem.enabled
    assert list(stack.parts) == list(PARTS)  # every component of the table, in its order


def test_required_component_left_out_names_file_key_and_fix(
    variant: Callable[..., Path],
) -> None:
    path = variant("lts-550-cuda12.4", _delete("cuda"))
    err = _raises(path)
    assert err.where == f"{path}: cuda"
    assert "missing component 'cuda'" in err.message and "not optional" in err.message
    assert (err.hint or "").startswith("add cuda: with its version and its debian and redhat")
    assert "nvidia_fs" in (err.hint or "")  # names what may be left out


def test_required_component_cannot_be_disabled(variant: Callable[..., Path]) -> None:
    err = _raises(variant("lts-550-cuda12.4", _set("cuda", {"enabled": False})))
    assert err.where and err.where.endswith(": cuda.enabled")


def test_schema_version(variant: Callable[..., Path]) -> None:
    err = _raises(variant("lts-550-cuda12.4", _set("schema", 2)))
    assert err.where and err.where.endswith(": schema")


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("schema: 1\nname: [broken\n")
    err = _raises(path)
    assert "not valid YAML" in err.message
    assert err.where and "line" in err.where


def test_missing_file(tmp_path: Path) -> None:
    err = _raises(tmp_path / "absent.yaml")
    assert "cannot read stack file" in err.message
