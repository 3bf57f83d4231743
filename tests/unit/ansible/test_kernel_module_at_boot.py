"""kernel_module's at_boot: the module lists itself in modules-load.d (what nvidia_gds and
nvidia_peermem did with a copy task of their own), with check mode, diff and a truthful
changed. Run for real, against the fake modinfo/modprobe of test_pinned_packages_module."""

from __future__ import annotations

import ast
import stat

import pytest
import yaml

from gpuboot import paths
from tests.unit.ansible import test_pinned_packages_module as base

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

OWNER = "role nvidia_gds"
# What the role's own copy task wrote before: a converged node's file stays byte for byte.
WANT = "# Managed by gpuboot (role nvidia_gds).\nnvidia_fs\n"


@pytest.fixture
def node(tmp_path):
    return lambda **extra: base.Node(tmp_path, {}, **extra)


def kmod(n: base.Node, check: bool = False, **args) -> dict:
    args.setdefault("modules_load_d", str(n.root / "etc" / "modules-load.d"))
    return base.kmod(n, check=check, at_boot=True, owner=OWNER, **args)


def boot_file(n: base.Node, name: str = "nvidia-fs"):
    return n.root / "etc" / "modules-load.d" / f"gpuboot-{name}.conf"


def test_at_boot_lists_the_module_for_every_boot_and_loads_it(node):
    n = node(modinfo={"nvidia_fs": "2.20.5"})
    result = kmod(n, name="nvidia_fs")
    assert result["changed"] and result["action"] == "load", result
    assert boot_file(n).read_text() == WANT
    assert stat.S_IMODE(boot_file(n).stat().st_mode) == 0o644
    assert n.calls("modprobe") == [["modprobe", "nvidia_fs"]]
    again = kmod(n, name="nvidia_fs")
    assert again["changed"] is False and "diff" not in again, again


def test_at_boot_check_mode_writes_nothing_and_shows_the_file(node):
    n = node(modinfo={"nvidia_peermem": "550.54.15"})
    result = kmod(n, check=True, name="nvidia_peermem")
    assert result["changed"] is True and n.calls("modprobe") == []
    assert not boot_file(n, "nvidia-peermem").exists()
    first = result["diff"][0]
    assert first["before_header"] == str(boot_file(n, "nvidia-peermem"))
    assert (first["before"], first["after"]) == (
        "",
        "# Managed by gpuboot (role nvidia_gds).\nnvidia_peermem\n",
    )
    # the diff shows the load too (a file's diff is all --diff would show of the task)
    assert result["diff"][1] == {
        "before_header": "kernel module nvidia_peermem",
        "before": "not loaded\n",
        "after": "550.54.15 loaded\n",
    }


def test_at_boot_alone_puts_back_an_edited_file(node):
    # loaded at its version: the file is the only change, and the only thing reported
    n = node(modinfo={"nvidia_fs": "2.20.5"})
    base.loaded(n, "nvidia_fs", "2.20.5")
    boot_file(n).parent.mkdir(parents=True)
    boot_file(n).write_text("# local\n")
    boot_file(n).chmod(0o600)
    checked = kmod(n, check=True, name="nvidia_fs")
    assert checked["changed"] is True and checked["diff"][0]["before"] == "# local\n"
    assert boot_file(n).read_text() == "# local\n"
    result = kmod(n, name="nvidia_fs")
    assert result["changed"] is True and result["action"] == "" and n.calls("modprobe") == []
    assert boot_file(n).read_text() == WANT
    assert stat.S_IMODE(boot_file(n).stat().st_mode) == 0o644
    assert kmod(n, name="nvidia_fs")["changed"] is False


def test_at_boot_lists_it_when_only_a_reboot_can_load_it(node):
    # the next boot loads the version the stack wants: modules-load.d must name it already
    n = node(modinfo={"nvidia_fs": "2.20.5"})
    base.loaded(n, "nvidia_fs", "2.17.3")
    marker = n.root / "marker"
    result = kmod(n, name="nvidia_fs", reboot_marker=str(marker))
    assert result["reboot_needed"] and n.calls("modprobe") == []
    assert boot_file(n).read_text() == WANT
    assert marker.read_text() == "nvidia_fs 2.17.3 loaded, 2.20.5 installed\n"
    assert result["diff"][1]["after"] == "2.20.5 after a reboot\n"


def test_without_at_boot_no_file_is_written(node):
    n = node(modinfo={"nvidia_fs": "2.20.5"})
    etc = n.root / "etc" / "modules-load.d"
    result = base.kmod(n, name="nvidia_fs", modules_load_d=str(etc))
    assert result["changed"] and "failed" not in result, result
    assert not etc.exists() and "diff" not in result


def test_its_documentation_parses_and_names_the_new_options():
    # ansible-doc (and ansible-lint's docs checks) read DOCUMENTATION as YAML
    source = (paths.COLLECTIONS_DIR / base.MODULES.replace(".", "/")).joinpath("kernel_module.py")
    tree = ast.parse(source.read_text())
    docs = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "RETURN")
    }
    options = yaml.safe_load(docs["DOCUMENTATION"])["options"]
    assert {"at_boot", "modules_load_d", "owner"} <= set(options)
    assert "action" in yaml.safe_load(docs["RETURN"])
