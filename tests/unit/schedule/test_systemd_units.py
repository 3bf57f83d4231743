"""The systemd service + timer pair: an argv systemd reads as given, the decided exit
codes, and units systemd-analyze verify accepts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuboot.errors import BadInput
from gpuboot.schedule import reported_codes, systemd

GPUBOOT = str(Path(sys.executable).parent / "gpuboot")


def _units(**kw) -> systemd.Units:
    inv = kw.pop("inventory", "/etc/gpuboot/site.yml")
    base = dict(
        name="gpuboot-scan",
        scan=[GPUBOOT, "scan", "-q", "-i", inv],
        idle_check=[GPUBOOT, "schedule", "--idle-check", "-q", "-i", inv],
        every="hourly",
        home=Path("/var/lib/gpuboot"),
        writable=(Path("/var/lib/node_exporter/textfile_collector"),),
    )
    return systemd.Units(**{**base, **kw})


def _directive(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def test_success_exit_status_lists_the_reported_codes():
    service = systemd.service(_units())
    assert _directive(service, "SuccessExitStatus") == [" ".join(map(str, reported_codes()))]
    assert "2" not in _directive(service, "SuccessExitStatus")[0].split()


def test_exec_start_is_the_scan_and_exec_condition_the_lock_check():
    service = systemd.service(_units())
    assert _directive(service, "ExecStart") == [f"{GPUBOOT} scan -q -i /etc/gpuboot/site.yml"]
    assert _directive(service, "ExecCondition") == [
        f"{GPUBOOT} schedule --idle-check -q -i /etc/gpuboot/site.yml"
    ]


def test_a_word_with_spaces_is_quoted_whole():
    service = systemd.service(_units(inventory="/srv/gpu fleet/site.yml"))
    assert _directive(service, "ExecStart")[0].endswith('-i "/srv/gpu fleet/site.yml"')


@pytest.mark.parametrize(
    "bad",
    [
        "/srv/%n.yml",
        "/srv/$HOME.yml",
        "/srv/a\\b.yml",
        '/srv/"a".yml',
        "/a;b",
        "/a\nExecStartPre=/bin/rm",
    ],
)
def test_a_character_systemd_would_interpret_is_refused(bad):
    with pytest.raises(BadInput, match="systemd would interpret"):
        systemd.service(_units(inventory=bad))


def test_hardening_keeps_the_scan_writable_paths():
    service = systemd.service(_units())
    assert _directive(service, "ProtectSystem") == ["strict"]
    assert _directive(service, "NoNewPrivileges") == ["yes"]
    assert _directive(service, "PrivateTmp") == ["yes"]
    assert _directive(service, "ReadWritePaths") == [
        "-/var/lib/gpuboot -/var/lib/node_exporter/textfile_collector"
    ]
    assert "Environment=GPUBOOT_HOME=/var/lib/gpuboot" in service


def test_a_bad_unit_name_user_or_calendar_is_refused():
    with pytest.raises(BadInput, match="--name"):
        systemd.files(_units(name="../x"))
    with pytest.raises(BadInput, match="--user"):
        systemd.files(_units(user="root\nExecStart=/bin/sh"))
    with pytest.raises(BadInput, match="--every"):
        systemd.files(_units(every="hourly\n[Service]"))


@pytest.mark.subprocess
@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
@pytest.mark.parametrize("user", [None, "gpuboot"])
def test_systemd_analyze_verify_accepts_the_units(tmp_path, user):
    for name, text in systemd.files(_units(user=user, every="*-*-* *:00/15:00")).items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run(
        ["systemd-analyze", "verify", "gpuboot-scan.service", "gpuboot-scan.timer"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "gpuboot-scan" not in proc.stderr, proc.stderr  # no warning about our units


@pytest.mark.subprocess
@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
def test_systemd_analyze_verify_catches_a_broken_unit(tmp_path):
    """The check above can fail: a directive systemd does not know is reported."""
    files = systemd.files(_units())
    for name, text in files.items():
        (tmp_path / name).write_text(text.replace("Type=oneshot", "Type=oneshot\nExecStrat=/x"))
    proc = subprocess.run(
        ["systemd-analyze", "verify", "gpuboot-scan.service"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "ExecStrat" in proc.stderr
