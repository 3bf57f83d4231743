"""`gpuboot schedule`: scan options checked when the files are written, not at the first
timer; the unit's lock check; the CronJob's inputs."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuboot import locks
from gpuboot.cli import main
from gpuboot.inventory import load_inventory
from gpuboot.schedule import EXIT_HOSTS_HELD

INVENTORY = """all:
  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, nvidia_driver_branch: "550",
         nvidia_driver_version: "550.54.15-0ubuntu1"}
  hosts:
    node1: {ansible_host: 10.0.0.1}
    node2: {ansible_host: 10.0.0.2}
"""
IMAGE = ["--kubernetes", "--image", "registry.example/gpuboot:0.1.0"]


@pytest.fixture
def inv(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    path = tmp_path / "site.yml"
    path.write_text(INVENTORY)
    return str(path)


def test_idle_check_passes_when_no_run_holds_the_hosts(inv, capsys):
    assert main(["schedule", "--idle-check", "-i", inv]) == 0


def test_idle_check_names_the_run_that_holds_a_host(inv, capsys):
    with locks.hold_inventory(load_inventory(inv), "node2", "install"):
        assert main(["schedule", "--idle-check", "-i", inv, "--json"]) == EXIT_HOSTS_HELD
    out = capsys.readouterr()
    assert "scheduled scan skipped: " in out.err and "gpuboot install" in out.err
    assert json.loads(out.out)["idle"] is False
    # the check gave the hosts back: the scan may take them
    assert main(["schedule", "--idle-check", "-i", inv]) == 0


def test_idle_check_leaves_a_broken_inventory_to_the_scan(tmp_path, capsys, monkeypatch):
    """Skipping would hide bad input: the scan runs, exits 2 and fails the unit."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    bad = tmp_path / "bad.yml"
    bad.write_text("all: [not, a, mapping]\n")
    assert main(["schedule", "--idle-check", "-i", str(bad)]) == 0


def test_scan_options_are_checked_when_written(inv, capsys):
    assert main(["schedule", "-i", inv, *IMAGE, "--", "--probes", "fastest"]) == 2
    assert "scan options after --" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra", [["-i", "/other.yml"], ["--limit", "node1"], ["--json"], ["--inv", "/o.yml"]]
)
def test_targets_and_json_belong_to_schedule_itself(inv, capsys, extra):
    assert main(["schedule", "-i", inv, *IMAGE, "--", *extra]) == 2
    assert "belong to gpuboot schedule itself" in capsys.readouterr().err


def test_a_limit_matching_nothing_is_refused_now(inv, capsys):
    assert main(["schedule", "-i", inv, "--limit", "node9", *IMAGE]) == 2


def test_a_relative_path_is_refused_for_a_unit(inv, capsys):
    assert main(["schedule", "-i", inv, "--", "--textfile-dir", "prom"]) == 2
    assert "the unit runs from /" in capsys.readouterr().err


def _cronjob(capsys, argv) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    return next(d for d in docs if d and d["kind"] == "CronJob")


def test_the_cronjob_carries_the_limit_and_the_scan_options(inv, capsys):
    cron = _cronjob(
        capsys,
        [
            "schedule",
            "-i",
            inv,
            "--limit",
            "node1",
            *IMAGE,
            "--every",
            "*/30 * * * *",
            "--",
            "--probes",
            "quick",
        ],
    )
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert container["args"][-4:] == ["--limit", "node1", "--probes", "quick"]
    assert cron["spec"]["schedule"] == "*/30 * * * *"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--kubernetes"], "--image"),
        ([*IMAGE, "--", "--kubeconfig", "/k"], "--kubeconfig"),
        ([*IMAGE, "--", "--history", "/srv/h.jsonl"], "not on the CronJob's volume"),
        ([*IMAGE, "--user", "gpuboot"], "--user"),
        ([*IMAGE, "--every", "*-*-* *:00/15:00"], "CronJob schedule"),
    ],
)
def test_cronjob_inputs_are_checked(inv, capsys, argv, named):
    assert main(["schedule", "-i", inv, *argv]) == 2
    assert named in capsys.readouterr().err


def test_a_cronjob_refuses_an_inventory_with_vars_dirs_beside_it(inv, tmp_path, capsys):
    (tmp_path / "group_vars").mkdir()
    assert main(["schedule", "-i", inv, *IMAGE]) == 2
    assert "group_vars beside it would be lost" in capsys.readouterr().err


def test_dir_writes_the_manifest(inv, tmp_path, capsys):
    assert main(["schedule", "-i", inv, *IMAGE, "--dir", str(tmp_path / "out"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["written"] == [str(tmp_path / "out" / "gpuboot-scan.yaml")]
    assert (tmp_path / "out" / "gpuboot-scan.yaml").read_text() == doc["files"]["gpuboot-scan.yaml"]


@pytest.mark.subprocess  # systemd-analyze calendar reads --every
def test_units_are_written_with_the_next_step(inv, tmp_path, capsys):
    out = tmp_path / "units"
    argv = ["schedule", "-i", inv, "--dir", str(out), "--home", "/var/lib/gpuboot"]
    assert main([*argv, "--", "--textfile-dir", "/var/lib/prom"]) == 0
    text = capsys.readouterr().out
    assert "systemctl enable --now gpuboot-scan.timer" in text
    service = (out / "gpuboot-scan.service").read_text()
    assert f"scan -q -i {inv} --textfile-dir /var/lib/prom" in service
    assert "ReadWritePaths=-/var/lib/gpuboot -/var/lib/prom" in service
