"""The breaker on the shared 2-node lab (lab2, as the flow tests leave it: installed and
healthy) in a fake Kubernetes cluster: every node shows the same Xid at once, as a bad driver
rollout or a wrong profile would make them. The scan takes no node out, names the shared
cause and the open breaker, and exits 6; the nodes stay visible as noncompliant. Once the
fault is cleared and the breaker reset, certify brings them back (certified, no mark of
gpuboot's left).

The acceptance scenario names a 5-node lab with 4 nodes failing; no lab of five is shared
(a new one would cost minutes), so the largest shared lab stands in: 2 of 2 nodes failing one
rule for one reason trip the breaker by their share (gpuboot.breaker.MIN_SHARE), as 4 of 5
would.
"""

from __future__ import annotations

import json

import pytest
import yaml

from gpuboot_lab import lab as labmod
from gpuboot_lab.kubeapi import FakeApiServer, node

from .conftest import gpuboot, ssh

pytestmark = pytest.mark.lab
NODES = ("node1", "node2")
TAINT = "gpuboot.io/uncertified"
STATE = "gpuboot.io/state"


@pytest.fixture
def lab(lab2) -> labmod.Lab:
    """lab2 with its stack installed (the flow tests install it; alone, this test does)."""
    installed = "dpkg-query -W -f '${Status}' nvidia-utils-550 | grep -qx 'install ok installed'"
    if any(ssh(lab2, n, installed).returncode for n in NODES):
        gpuboot("install", "-i", str(lab2.inventory), "-q", check_rc=0)
    return lab2


@pytest.fixture
def cluster(tmp_path):
    server = FakeApiServer().start()
    for name in NODES:
        server.add(node(name))
    try:
        yield server, str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    finally:
        server.stop()


def _taken_out(server, name: str) -> bool:
    return any(t.get("key") == TAINT for t in server.nodes[name]["spec"].get("taints") or [])


def _labels(server, name: str) -> dict:
    return server.nodes[name]["metadata"].get("labels") or {}


def test_the_same_xid_on_every_node_opens_the_breaker_and_takes_none_out(lab, cluster, tmp_path):
    server, kubeconfig = cluster
    history = str(tmp_path / "history.jsonl")
    for name in NODES:  # the same fault on every node at once: a shared cause
        gpuboot("lab", "fault", "--name", lab.name, name, "xid", "48", "0", check_rc=0)
    try:
        proc = gpuboot("scan", "-i", str(lab.inventory), "--json", "--history", history,
                       "--kubeconfig", kubeconfig)  # fmt: skip
        assert proc.returncode == 6, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
    finally:
        for name in NODES:  # repaired; the kernel log keeps the Xid until the next boot
            gpuboot("lab", "clear", "--reboot", "--name", lab.name, name, check_rc=0)
    assert doc["exit_code"] == 6 and "XID-001" in doc["breaker"]["opened"]
    (alert,) = [a for a in doc["breaker"]["alerts"] if "XID-001" in a]
    assert "2 of 2 nodes fail it for the same reason: Xid 48" in alert
    assert "suspect the rule, profile, probe or a rollout" in alert
    assert sum(_taken_out(server, n) for n in NODES) <= 1  # at most one: here none at all
    assert not any(_taken_out(server, n) for n in NODES)
    assert [_labels(server, n).get(STATE) for n in NODES] == ["noncompliant"] * 2
    assert all("breaker open for" in a["held"] for a in doc["k8s_gate"])

    status = gpuboot("breaker", "status", "--history", history, "--json")
    assert status.returncode == 6 and "XID-001" in status.stdout
    reset = gpuboot("breaker", "reset", "--history", history, "--reason", "fault cleared")
    assert reset.returncode == 0 and "XID-001" in reset.stdout

    key = tmp_path / "key.pem"
    gpuboot("cert", "keygen", str(key), check_rc=0)
    # --probes none measures nothing: the site's policy for these nodes accepts that gap
    site = yaml.safe_load(lab.inventory.read_text())
    site["all"].setdefault("vars", {})["gpuboot_accept_partial"] = ["no-probes"]
    (tmp_path / "site.yml").write_text(yaml.safe_dump(site))
    certify = ["certify", "-i", str(tmp_path / "site.yml"), "--json", "--probes", "none"]
    proc = gpuboot(*certify, "--sign-key", str(key), "--kubeconfig", kubeconfig)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in NODES:  # back: certified, gpuboot's flag gone
        labels = _labels(server, name)
        assert labels.get("gpuboot.io/certified") == "true" and STATE not in labels
        assert not _taken_out(server, name)


# A stand-in for gpuboot on a lab node (the controller here has no systemd as PID 1; lab
# nodes do, and gpuboot is not installed on them): it exits with the code the test left
# in /run/gpuboot-standin/<verb>, so the units gpuboot schedule ships run under a real
# systemd (Debian 12's, 252) with their hardening, ExecCondition and SuccessExitStatus.
STANDIN = "/usr/local/bin/gpuboot-standin"
STANDIN_SCRIPT = '#!/bin/sh\nexit "$(cat /run/gpuboot-standin/$1)"\n'
UNIT = "gpuboot-scan.service"


def _put(lab, path: str, text: str, mode: str = "0644") -> None:
    import base64

    data = base64.b64encode(text.encode()).decode()
    proc = ssh(lab, "node1", f"echo {data} | base64 -d > {path} && chmod {mode} {path}")
    assert proc.returncode == 0, proc.stderr


def _run(lab, *, idle: int, scan: int, by_timer: bool = False) -> tuple[str, str]:
    """(is-active after the run, its Result) for one run of the shipped service."""
    # by the timer: wait for the service's next invocation to end (at most 10 s)
    wait = (
        f'for i in $(seq 100); do sleep 0.1; [ "$(systemctl show -p InvocationID --value {UNIT})"'
        f' != "$before" ] && [ "$(systemctl is-active {UNIT})" != activating ] && break; done'
    )
    start = (
        f"systemctl start gpuboot-scan.timer; {wait}; systemctl stop gpuboot-scan.timer"
        if by_timer
        else f"systemctl start {UNIT}"
    )
    proc = ssh(
        lab,
        "node1",
        f"echo {idle} > /run/gpuboot-standin/schedule; echo {scan} > /run/gpuboot-standin/scan; "
        f"systemctl reset-failed {UNIT} 2>/dev/null; "
        f"before=$(systemctl show -p InvocationID --value {UNIT}); {start}; "
        f"systemctl is-active {UNIT}; systemctl show -p Result --value {UNIT}",
    )
    state, result = proc.stdout.split()[-2:]
    return state, result


def test_a_scheduled_scan_that_reports_leaves_its_unit_inactive_not_failed(lab2):
    from pathlib import Path

    from gpuboot.schedule import EXIT_HOSTS_HELD, systemd

    target = ["-q", "-i", "/etc/gpuboot/site.yml"]
    units = systemd.Units(
        name="gpuboot-scan",
        scan=[STANDIN, "scan", *target],
        idle_check=[STANDIN, "schedule", "--idle-check", *target],
        every="hourly",
        home=Path("/var/lib/gpuboot"),
        writable=(),
    )
    ssh(lab2, "node1", "mkdir -p /run/gpuboot-standin /var/lib/gpuboot")
    _put(lab2, STANDIN, STANDIN_SCRIPT, "0755")
    for name, text in systemd.files(units).items():
        _put(lab2, f"/etc/systemd/system/{name}", text)
    # the shipped timer fires hourly; a drop-in makes it fire now, as it would on the hour
    ssh(lab2, "node1", "mkdir -p /etc/systemd/system/gpuboot-scan.timer.d")
    _put(
        lab2,
        "/etc/systemd/system/gpuboot-scan.timer.d/now.conf",
        "[Timer]\nOnActiveSec=1\nAccuracySec=1\n",
    )
    assert ssh(lab2, "node1", "systemctl daemon-reload").returncode == 0
    try:
        # the acceptance: a timer-started scan with a known failure (still failing: 5)
        assert _run(lab2, idle=0, scan=5, by_timer=True) == ("inactive", "success")
        assert _run(lab2, idle=0, scan=3, by_timer=True) == ("failed", "exit-code")
        for code in (0, 1, 4, 6):  # the scan ran and reported
            assert _run(lab2, idle=0, scan=code) == ("inactive", "success"), code
        assert _run(lab2, idle=0, scan=2) == ("failed", "exit-code")  # bad input
        # another run holds the hosts: skipped by the condition, not failed
        assert _run(lab2, idle=EXIT_HOSTS_HELD, scan=3) == ("inactive", "success")
    finally:
        ssh(lab2, "node1", f"rm -rf /etc/systemd/system/gpuboot-scan.* {STANDIN} "
            "/run/gpuboot-standin; systemctl daemon-reload")  # fmt: skip
