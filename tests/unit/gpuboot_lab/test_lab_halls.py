"""A lab with halls, without podman: --halls checked before anything starts, the state it
records, and the inventory it writes (domains, the executors group, the executor's SSH)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from gpuboot import paths
from gpuboot.errors import BadInput
from gpuboot_lab import lab as labmod

PROFILE = {"name": "hgx-h100-sxm-8gpu", "hardware": {"nics": []}}
REPO = SimpleNamespace(suite="gpuboot-lab", component="main", public_key_path=Path("/k.asc"))


@pytest.mark.parametrize(("nodes", "halls"), [(2, 3), (20, 9), (4, -1)])
def test_halls_out_of_range_are_refused_before_anything_starts(nodes: int, halls: int) -> None:
    with pytest.raises(BadInput, match="--halls"):
        labmod.up("x", nodes, "hgx-h100-sxm-8gpu", halls=halls)


def _hall_lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> labmod.Lab:
    monkeypatch.setattr(paths, "labs_dir", lambda: tmp_path / "labs")
    lab = labmod.Lab(name="halls", profile=PROFILE["name"])
    lab.halls = [
        labmod.Hall("hall-a", "n1", "10.1.0.0/24", "10.1.0.2", "10.0.0.5", "10.1.0.3", "c1"),
        labmod.Hall("hall-b", "n2", "10.2.0.0/24", "10.2.0.2", "10.0.0.6", "10.2.0.3", "c2"),
    ]
    lab.nodes = [
        labmod.Node("node1", "10.1.0.10", domain="hall-a"),
        labmod.Node("node2", "10.2.0.11", domain="hall-b"),
    ]
    lab.dir.mkdir(parents=True)
    return lab


def test_the_inventory_names_each_nodes_hall_and_the_executors_serving_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = _hall_lab(tmp_path, monkeypatch)
    labmod._write_inventory(lab, REPO, None, "10.0.0.2", PROFILE)
    inv = yaml.safe_load(lab.inventory.read_text())["all"]
    node1 = inv["children"]["gpu_nodes"]["hosts"]["node1"]
    assert node1["ansible_host"] == "10.1.0.10"
    assert node1["gpuboot_domain"] == "hall-a"
    assert node1["gpuboot_apt_repo_url"] == "http://10.1.0.2/"  # the repository in its hall
    # the executor checks the node's host key against its own known hosts, not the
    # controller's file (out of its reach)
    assert "UserKnownHostsFile" not in node1["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in node1["ansible_ssh_common_args"]
    assert "UserKnownHostsFile" in inv["vars"]["ansible_ssh_common_args"]  # the executors'
    assert inv["children"]["gpuboot_executors"]["hosts"] == {
        "hall-a-executor": {"ansible_host": "10.0.0.5", "gpuboot_executor_domains": ["hall-a"]},
        "hall-b-executor": {"ansible_host": "10.0.0.6", "gpuboot_executor_domains": ["hall-b"]},
    }


def test_a_lab_without_halls_writes_no_domains_and_no_executors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paths, "labs_dir", lambda: tmp_path / "labs")
    lab = labmod.Lab(
        name="flat", profile=PROFILE["name"], nodes=[labmod.Node("node1", "10.0.0.10")]
    )
    lab.dir.mkdir(parents=True)
    labmod._write_inventory(lab, REPO, None, "10.0.0.2", PROFILE)
    inv = yaml.safe_load(lab.inventory.read_text())["all"]
    assert list(inv["children"]) == ["gpu_nodes"]
    assert inv["children"]["gpu_nodes"]["hosts"]["node1"] == {"ansible_host": "10.0.0.10"}


def test_the_halls_and_their_executors_are_recorded_for_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = _hall_lab(tmp_path, monkeypatch)
    lab.save()
    back = labmod.load("halls")
    assert back.halls == lab.halls and back.nodes == lab.nodes
    assert back.hall("hall-b").executor == "hall-b-executor"
