"""pinned_packages' two options for the roles that were still YAML: hold_installed (the
baseline's kernel metas: held when installed, never installed) and unpinned (probe tools a
site does not version: installed at the candidate when missing, neither pinned nor held).
The same fakes as test_pinned_packages_module, apt-get taught the candidate of a bare name."""

from __future__ import annotations

import json

import pytest

from tests.unit.ansible import test_pinned_packages_module as base

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

BARE = 'name, version = item.split("=")'
assert BARE in base.FAKE  # the fake this file extends
FAKE = base.FAKE.replace(
    BARE, 'name, _, version = item.partition("="); version = version or state["candidate"][name]'
)
KERNEL = "linux-image-6.8.0-60-generic"
PIN = f"{KERNEL}=6.8.0-60.63"


class Node(base.Node):
    def __init__(self, root, packages, **extra):
        super().__init__(root, packages, **extra)
        for tool in base.TOOLS:
            (root / "bin" / tool).write_text(f"#!{base.sys.executable}\n{FAKE}")


@pytest.fixture
def node(tmp_path):
    return lambda packages, **extra: Node(tmp_path, json.loads(json.dumps(packages)), **extra)


def test_hold_installed_holds_an_installed_meta_and_leaves_a_missing_one_alone(node):
    n = node({KERNEL: ["6.8.0-60.63", "hi "], "linux-image-generic": ["6.8.0-60.61", "ii "]})
    metas = [KERNEL, "linux-image-generic", "linux-generic"]  # linux-generic not installed
    result = n.pins([PIN], hold_installed=metas)
    assert result["changed"] and result["held"] == ["linux-image-generic"]
    assert result["installed"] == [] and n.calls("apt-get") == []
    assert n.packages()["linux-image-generic"] == ["6.8.0-60.61", "hi "]
    assert "linux-generic" not in n.packages()
    assert n.pins([PIN], hold_installed=metas)["changed"] is False


def test_hold_installed_in_check_mode_reports_the_hold_and_holds_nothing(node):
    n = node({KERNEL: ["6.8.0-60.63", "hi "], "linux-image-generic": ["6.8.0-60.61", "ii "]})
    result = n.pins([PIN], check=True, hold_installed=["linux-image-generic"])
    assert result["changed"] and result["held"] == ["linux-image-generic"]
    assert "linux-image-generic held\n" in result["diff"][1]["after"]
    assert n.packages()["linux-image-generic"][1] == "ii " and n.calls("dpkg") == []


def test_unpinned_installs_the_candidate_without_pin_or_hold(node):
    n = node({"openssh-server": ["1:9.2p1-2", "ii "]}, candidate={"site-probes": "2.0-1"})
    result = n.pins(["gpuboot-probes=0.6-1"], unpinned=["site-probes"])
    assert result["installed"] == ["gpuboot-probes=0.6-1", "site-probes"]
    assert n.calls("apt-get")[0][-2:] == ["gpuboot-probes=0.6-1", "site-probes"]
    assert n.packages()["site-probes"] == ["2.0-1", "ii "]  # not held
    assert result["held"] == ["gpuboot-probes"]
    assert "site-probes" not in (n.root / base.PIN_FILE).read_text()
    assert n.pins(["gpuboot-probes=0.6-1"], unpinned=["site-probes"])["changed"] is False


def test_unpinned_alone_writes_no_pin_file_and_check_mode_says_would_install(node):
    # check mode on a fresh node whose mirror this run configures: apt cannot see the
    # package yet, the module never asks it, and reports the install
    n = node({"openssh-server": ["1:9.2p1-2", "ii "]}, candidate={"site-probes": "2.0-1"})
    result = n.pins([], check=True, unpinned=["site-probes"])
    assert result["changed"] and result["installed"] == ["site-probes"]
    assert result["pinned"] is False and [c[0] for c in n.calls()] == ["dpkg-query"]
    result = n.pins([], unpinned=["site-probes"])
    assert result["changed"] and not (n.root / base.PIN_FILE).exists()


def test_an_unpinned_package_apt_did_not_install_fails_the_task(node):
    n = node({"openssh-server": ["1:9.2p1-2", "ii "]}, candidate={"site-probes": "2.0-1"})
    (n.root / "bin" / "apt-get").write_text("#!/bin/sh\nexit 0\n")  # says yes, does nothing
    result = n.pins([], unpinned=["site-probes"])
    assert result.get("failed") and "site-probes absent" in result["msg"], result


def test_nothing_to_install_is_refused(node):
    result = node({"openssh-server": ["1:9.2p1-2", "ii "]}).pins([])
    assert result.get("failed") and "nothing to install" in result["msg"], result
