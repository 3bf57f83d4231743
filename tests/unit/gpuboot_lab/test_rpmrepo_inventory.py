"""EL and mixed labs without podman: --os parsing and the inventory a lab writes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from gpuboot import paths
from gpuboot.errors import BadInput
from gpuboot_lab import lab as labmod
from gpuboot_lab.rpmrepo import RpmRepoInfo

PROFILE = {"name": "hgx-h100-sxm-8gpu", "hardware": {"nics": []}}


def test_os_spec_is_checked_before_anything_starts() -> None:
    assert labmod.parse_os("el9") == ["el9"]
    assert labmod.parse_os("debian, el9") == ["debian", "el9"]
    for bad in ("rhel9", "el9,ubuntu", ""):
        with pytest.raises(BadInput, match="--os"):
            labmod.parse_os(bad)
    with pytest.raises(BadInput, match="--os"):
        labmod.up("x", 1, "hgx-h100-sxm-8gpu", os_spec="centos7")


def _inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oses: list[str]) -> dict:
    monkeypatch.setattr(paths, "labs_dir", lambda: tmp_path / "labs")
    lab = labmod.Lab(name="mix", profile=PROFILE["name"])
    lab.nodes = [
        labmod.Node(name=f"node{i}", ip=f"10.0.0.{10 + i}", os=os_name)
        for i, os_name in enumerate(oses, start=1)
    ]
    lab.dir.mkdir(parents=True)
    repo = SimpleNamespace(suite="gpuboot-lab", component="main", public_key_path=Path("/k.asc"))
    rpm_repo = RpmRepoInfo(
        out_dir=Path("/home/repo/rpm"),
        fingerprint="F",
        public_key_path=Path("/home/repo/rpm/RPM-GPG-KEY-gpuboot-lab"),
        rpms=(),
        rebuilt=False,
    )
    labmod._write_inventory(lab, repo, rpm_repo, "10.0.0.2", PROFILE)
    return yaml.safe_load(lab.inventory.read_text())["all"]


def test_el_lab_inventory_names_the_family_and_the_signed_dnf_repo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = _inventory(tmp_path, monkeypatch, ["el9", "el9"])
    shared = inv["vars"]
    assert shared["gpuboot_os_family"] == "redhat"
    assert shared["gpuboot_dnf_repo_url"] == "http://10.0.0.2/rpm/rhel9/x86_64/"
    assert shared["gpuboot_dnf_repo_key_file"] == "/home/repo/rpm/RPM-GPG-KEY-gpuboot-lab"
    assert shared["nvidia_driver_version"] == "3:550.54.15-1.el9"
    assert shared["gpuboot_probe_tools_packages"] == ["gpuboot-probes-0.6-1"]
    assert not [k for k in shared if k.startswith("gpuboot_apt_")]
    assert inv["children"]["gpu_nodes"]["hosts"]["node2"] == {"ansible_host": "10.0.0.12"}


def test_mixed_lab_gives_each_node_its_own_os_vars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inv = _inventory(tmp_path, monkeypatch, ["debian", "el8", "el10"])
    hosts = inv["children"]["gpu_nodes"]["hosts"]
    assert "gpuboot_os_family" not in inv["vars"]
    assert inv["vars"]["nvidia_driver_branch"] == "550"  # shared by all: hoisted
    assert hosts["node1"]["gpuboot_apt_repo_url"] == "http://10.0.0.2/"
    assert hosts["node1"]["nvidia_driver_version"] == "550.54.15-1"
    assert "gpuboot_os_family" not in hosts["node1"]  # debian is the default family
    assert hosts["node2"]["gpuboot_os_family"] == "redhat"
    assert hosts["node2"]["gpuboot_dnf_repo_url"] == "http://10.0.0.2/rpm/rhel8/x86_64/"
    assert hosts["node3"]["gpuboot_dnf_repo_url"] == "http://10.0.0.2/rpm/rhel10/x86_64/"
    assert not [k for k in hosts["node3"] if k.startswith("gpuboot_apt_")]
