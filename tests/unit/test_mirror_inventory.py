"""`gpuboot mirror -i INV`: the union of the stacks the inventory's hosts name, the list
alone on stdout and the summary on stderr."""

from __future__ import annotations

import json

import pytest

from gpuboot.cli import main

INVENTORY = """all:
  vars: {gpuboot_profile: hgx-h100-sxm-8gpu}
  children:
    hall_a:
      vars: {gpuboot_stack: lts-550-cuda12.4}
      hosts: {node1: {ansible_host: 10.0.0.1}, node2: {ansible_host: 10.0.0.2}}
    hall_b:
      vars: {gpuboot_stack: prod-570-cuda12.8}
      hosts: {node3: {ansible_host: 10.0.0.3}}
    legacy:
      vars: {nvidia_driver_branch: "550", nvidia_driver_version: 550.54.15-1}
      hosts: {node4: {ansible_host: 10.0.0.4}}
"""


@pytest.fixture
def inv(tmp_path):
    path = tmp_path / "site.yml"
    path.write_text(INVENTORY)
    return str(path)


def _lines(capsys, argv) -> tuple[set[str], str]:
    assert main(argv) == 0
    out = capsys.readouterr()
    return set(out.out.split()), out.err


def test_the_union_of_the_inventorys_stacks(inv, capsys):
    lts, _ = _lines(capsys, ["mirror", "--stack", "lts-550-cuda12.4"])
    prod, _ = _lines(capsys, ["mirror", "--stack", "prod-570-cuda12.8"])
    union, err = _lines(capsys, ["mirror", "-i", inv])
    assert union == lts | prod and lts - prod and prod - lts
    assert "lts-550-cuda12.4: node1, node2" in err and "prod-570-cuda12.8: node3" in err
    assert "node4 pin the driver alone" in err


def test_limit_selects_the_stacks_of_its_hosts(inv, capsys):
    prod, _ = _lines(capsys, ["mirror", "--stack", "prod-570-cuda12.8"])
    limited, err = _lines(capsys, ["mirror", "-i", inv, "--limit", "hall_b"])
    assert limited == prod and "lts-550" not in err


@pytest.mark.parametrize("argv", [["--stack", "lts-550-cuda12.4"], ["-i", "{inv}"]])
def test_stdout_holds_the_list_alone(inv, capsys, argv):
    lines, err = _lines(capsys, ["mirror", *(a.format(inv=inv) for a in argv)])
    assert lines and all("=" in line and " " not in line for line in lines)
    assert "top-level packages only" in err


def test_the_json_names_each_stacks_hosts(inv, capsys):
    assert main(["mirror", "-i", inv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hosts"] == {"lts-550-cuda12.4": ["node1", "node2"], "prod-570-cuda12.8": ["node3"]}
    assert doc["driver_only"] == ["node4"]
    driver = [p for p in doc["packages"] if p["name"].startswith("nvidia-driver-")]
    assert {p["version"] for p in driver} == {"550.54.15-1", "570.133.20-1"}


def test_hosts_of_two_os_families_need_one_chosen(inv, tmp_path, capsys):
    mixed = tmp_path / "mixed.yml"
    mixed.write_text(
        INVENTORY.replace(
            "vars: {gpuboot_stack: prod-570-cuda12.8}",
            "vars: {gpuboot_stack: prod-570-cuda12.8, gpuboot_os_family: redhat}",
        )
    )
    assert main(["mirror", "-i", str(mixed)]) == 2
    assert "several OS families" in capsys.readouterr().err
    lines, err = _lines(capsys, ["mirror", "-i", str(mixed), "--os-family", "redhat"])
    assert "prod-570-cuda12.8: node3" in err and all("=" not in line for line in lines)


@pytest.mark.parametrize("argv", [[], ["--stack", "lts-550-cuda12.4", "-i", "{inv}"]])
def test_a_stack_or_an_inventory(inv, capsys, argv):
    assert main(["mirror", *(a.format(inv=inv) for a in argv)]) == 2
    assert "either --stack or -i" in capsys.readouterr().err
