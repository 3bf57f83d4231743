"""`gpuboot scan` on a 1-node lab in service (a fake Kubernetes API server stands for the
cluster): a healthy node scans clean and is left alone; a fallen NVLink is new drift, the
node is taken out of service (gpuboot's taint, no cordon) and exit 1; once the fault is cleared the
rule shows as cleared. Every scan adds a history line and a node_exporter textfile. An
NVLink CRC counter growing across three scans of one boot is WARN naming its rate (TRD-001),
never FAIL; after a reboot the next scan counts no growth (a new boot's first reading)."""

from __future__ import annotations

import json
import re

import pytest

from gpuboot_lab import lab as labmod
from gpuboot_lab.kubeapi import FakeApiServer, node

from .conftest import gpuboot

pytestmark = pytest.mark.lab
UNCERT = "gpuboot.io/uncertified"


@pytest.fixture(scope="module")
def lab(make_lab) -> labmod.Lab:
    lab = make_lab(nodes=1)
    gpuboot("install", "-i", str(lab.inventory), "--json", check_rc=0)
    return lab


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    server = FakeApiServer().start()
    server.add(node("node1"))
    try:
        yield server, server.write_kubeconfig(tmp_path_factory.mktemp("k8s") / "kubeconfig")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return tmp_path_factory.mktemp("scan")


def scan(lab, cluster, dirs, rc: int | tuple[int, ...]) -> dict:
    """`gpuboot scan --json` with the exit code (or one of the codes) expected."""
    _server, kubeconfig = cluster
    proc = gpuboot(
        "scan", "-i", str(lab.inventory), "--json", "--history", str(dirs / "history.jsonl"),
        "--textfile-dir", str(dirs), "--kubeconfig", str(kubeconfig),
    )  # fmt: skip
    assert proc.returncode in (rc if isinstance(rc, tuple) else (rc,)), proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["passed"] == (proc.returncode == 0)
    doc["exit"] = proc.returncode
    return doc


def history(dirs) -> list[dict]:
    return [json.loads(line) for line in (dirs / "history.jsonl").read_text().splitlines()]


def test_healthy_node_scans_clean_and_is_left_alone(lab, cluster, dirs):
    doc = scan(lab, cluster, dirs, 0)
    (n,) = doc["nodes"]
    assert n["verdict"] == "PASS" and n["drift"]["previous_scan"] is None
    assert n["drift"]["new"] == [] and doc["k8s_gate"] == []
    assert cluster[0].patches() == []  # a scan never lets a node in, nor touches a good one
    assert [(r["host"], r["verdict"], r["failing"]) for r in history(dirs)] == [
        ("node1", "PASS", {})
    ]
    assert (
        'gpuboot_scan_node_verdict{host="node1",verdict="PASS"} 1'
        in (dirs / "gpuboot-scan.prom").read_text()
    )


CRC_GROWTH = re.compile(
    r"NVLink CRC errors on GPU1 link 2 grew [\d,]+/h over 3 scans \([\d.]+ (s|min)\), "
    r"threshold 100/h"
)


def trend(doc: dict) -> dict:
    (n,) = doc["nodes"]
    return next(f for f in n["findings"] if f["rule"] == "TRD-001")


def test_a_growing_crc_counter_warns_with_its_rate(lab, cluster, dirs):
    name = lab.name
    gpuboot(
        "lab", "fault", "--name", name, "node1", "nvlink-crc-growth", "1", "2", "6000",
        "--survive-reboot", check_rc=0,
    )  # fmt: skip
    # the healthy scan before read the counter at 0 in this boot: with two more, three scans
    docs = [scan(lab, cluster, dirs, 0) for _ in range(2)]
    assert [trend(d)["status"] for d in docs] == ["SKIPPED", "WARN"]
    (n,) = docs[-1]["nodes"]
    assert n["verdict"] == "WARN", n["findings"]  # a warning: never FAIL, never out of service
    assert CRC_GROWTH.fullmatch(trend(docs[-1])["reason"]), trend(docs[-1])["reason"]
    assert (
        'gpuboot_scan_rule_status{host="node1",rule="TRD-001",status="WARN"} 1'
        in (dirs / "gpuboot-scan.prom").read_text()
    )
    # the count restarts at 0; the next scan (test_drift's) is a new boot's first reading
    gpuboot("lab", "reboot", "--name", name, "node1", check_rc=0)


def test_drift_is_new_and_takes_the_node_out_of_service(lab, cluster, dirs):
    gpuboot("lab", "fault", "--name", lab.name, "node1", "nvlink-down", "1", "3", check_rc=0)
    doc = scan(lab, cluster, dirs, 1)
    (n,) = doc["nodes"]
    assert n["verdict"] == "FAIL" and "NVL-001" in n["drift"]["new"]
    assert n["drift"]["previous_scan"] == history(dirs)[-2]["time"]
    # rebooted since the CRC growth scans: a new boot's first reading, no growth counted
    assert trend(doc)["status"] == "SKIPPED", trend(doc)
    stored = cluster[0].nodes["node1"]
    assert not stored["spec"].get("unschedulable")  # gpuboot's keyed taint, not the shared cordon
    assert UNCERT in {t["key"] for t in stored["spec"]["taints"]}
    assert stored["metadata"]["labels"]["gpuboot.io/state"] == "taken-out"
    assert history(dirs)[-1]["failing"]["NVL-001"] == "FAIL"
    assert (
        'gpuboot_scan_node_verdict{host="node1",verdict="FAIL"} 1'
        in (dirs / "gpuboot-scan.prom").read_text()
    )


def test_cleared_fault_shows_as_cleared(lab, cluster, dirs):
    gpuboot("lab", "clear", "--name", lab.name, "node1", check_rc=0)
    doc = scan(lab, cluster, dirs, (0, 5))  # 5: nothing new, something still failing
    (n,) = doc["nodes"]
    assert "NVL-001" in n["drift"]["cleared"] and "NVL-001" not in n["drift"]["new"]
    # what still fails (the kernel log keeps the link's Xid) is "still", not new again
    assert n["drift"]["new"] == []
    assert doc["exit"] == (5 if n["drift"]["still"] else 0)
    assert len(history(dirs)) == 5
