"""Prometheus textfiles at fleet scale: units in the metric name, certify and scan families
distinct, scan drift and last-scan metrics, the scan textfile merged under --limit, label
values escaped, no duplicate series, and promtool's own check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuboot.report import prometheus
from gpuboot.results import RunReport

from .conftest import NOW
from .fleet import FIGURES, fleet_report, scan_report
from .test_prometheus import parse

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

ODD = 'rack"1\\node\n7'  # quote, backslash, newline: each escaped in a label value


def _promtool(text: str) -> subprocess.CompletedProcess[str]:
    # make setup unpacks promtool beside the venv's python: missing is a failure, not a skip
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    tool = shutil.which("promtool", path=search)
    assert tool, "promtool is missing: run make setup (it unpacks Debian's prometheus package)"
    return subprocess.run(
        [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )


def _series(fam: dict[str, dict]) -> set[tuple]:
    return {(name, labels) for name, f in fam.items() for labels in f["samples"]}


@pytest.fixture(scope="module")
def fleet_text() -> str:
    return prometheus.render(RunReport.from_dict(fleet_report()), now=NOW)


def test_units_in_the_name_in_base_units_never_in_a_label(fleet_text):
    fam = parse(fleet_text)
    assert not any("unit" in dict(k) for f in fam.values() for k in f["samples"])
    assert [n for n in fam if "bandwidth" in n] == ["gpuboot_certify_bandwidth_bytes_per_second"]
    bw = fam["gpuboot_certify_bandwidth_bytes_per_second"]["samples"]
    node1 = {dict(k)["figure"]: v for k, v in bw.items() if dict(k)["host"] == "node1"}
    assert set(node1) == {figure for _r, figure, _u, _b in FIGURES}
    report = fleet_report(1)["nodes"][0]["measurements"]
    given = {m["name"]: m["value"] for m in report}
    assert node1["nvbandwidth_h2d"] == pytest.approx(given["nvbandwidth_h2d"] * 1e9)  # GB/s
    assert node1["ib_write_bw"] == pytest.approx(given["ib_write_bw"] * 1e9 / 8)  # Gb/s
    assert not any(dict(k)["host"] == "node2" for k in bw)  # not measured: no fake 0


def test_certify_and_scan_families_are_distinct(fleet_text):
    scan = prometheus.render(
        RunReport.from_dict(scan_report(["node1"], {})), now=NOW, kind=prometheus.SCAN
    )
    certify, scanned = parse(fleet_text), parse(scan)
    assert all(n.startswith("gpuboot_certify_") for n in certify)
    assert all(n.startswith("gpuboot_scan_") for n in scanned)
    # both files in one collector directory: not one series in common
    assert not _series(certify) & _series(scanned)
    assert "gpuboot_scan_node_certified" not in scanned  # a scan certifies nothing


def test_scan_drift_and_last_scan_timestamp():
    report = scan_report(["node1", "node2"], {"node2": "NVL-001"})
    report["nodes"][1]["drift"].update(new=[], still=["NVL-001"], cleared=["PCI-001"])
    fam = parse(prometheus.render(RunReport.from_dict(report), now=NOW, kind=prometheus.SCAN))
    drift = fam["gpuboot_scan_drift_rules"]["samples"]
    assert drift[(("host", "node2"), ("change", "still"))] == 1
    assert drift[(("host", "node2"), ("change", "new"))] == 0
    assert drift[(("host", "node2"), ("change", "cleared"))] == 1
    assert drift[(("host", "node1"), ("change", "new"))] == 0
    last = fam["gpuboot_scan_last_scan_timestamp_seconds"]["samples"]
    assert last == {(("host", "node1"),): NOW.timestamp(), (("host", "node2"),): NOW.timestamp()}


def test_limit_merge_keeps_the_nodes_not_in_this_run(tmp_path: Path):
    prom = tmp_path / "gpuboot-scan.prom"
    earlier = NOW.replace(hour=9)
    full = scan_report(["node1", "node2", ODD], {"node2": "NVL-001", ODD: "PCI-001"})
    path, warning = prometheus.write_merged(RunReport.from_dict(full), prom, now=earlier)
    assert path == prom and warning is None
    # scan --limit node1: node1 fails now; node2's FAIL (and its alert) must stay
    path, warning = prometheus.write_merged(
        RunReport.from_dict(scan_report(["node1"], {"node1": "XID-001"})), prom, now=NOW
    )
    text = prom.read_text()
    fam = parse(text)  # strict: families contiguous, no duplicate series
    assert warning is None
    rules = fam["gpuboot_scan_rule_status"]["samples"]
    assert rules[(("host", "node2"), ("rule", "NVL-001"), ("status", "FAIL"))] == 1
    assert rules[(("host", ODD), ("rule", "PCI-001"), ("status", "FAIL"))] == 1  # escaped, kept
    assert rules[(("host", "node1"), ("rule", "XID-001"), ("status", "FAIL"))] == 1
    last = fam["gpuboot_scan_last_scan_timestamp_seconds"]["samples"]
    assert last[(("host", "node1"),)] == NOW.timestamp()
    assert last[(("host", "node2"),)] == earlier.timestamp()  # its own scan's time, not ours
    assert {dict(k)["host"] for k in fam["gpuboot_scan_node_verdict"]["samples"]} == {
        "node1",
        "node2",
        ODD,
    }
    # the same run again changes nothing: merging is idempotent
    prometheus.write_merged(
        RunReport.from_dict(scan_report(["node1"], {"node1": "XID-001"})), prom, now=NOW
    )
    assert prom.read_text() == text
    assert _promtool(text).returncode == 0


@pytest.mark.parametrize(
    "previous",
    [
        b"\xff\xfe garbage",
        b'gpuboot_scan_node_verdict{host="node2",verdict="FAIL"} 1 trailing junk\n',
        b'gpuboot_scan_node_verdict{host="node2 1\n',
        b"<html>not metrics</html>\n",
    ],
)
def test_a_corrupt_previous_file_is_written_afresh_with_a_warning(tmp_path: Path, previous):
    prom = tmp_path / "gpuboot-scan.prom"
    prom.write_bytes(previous)
    path, warning = prometheus.write_merged(
        RunReport.from_dict(scan_report(["node1"], {})), prom, now=NOW
    )
    assert warning and str(prom) in warning and "written afresh" in warning
    fam = parse(path.read_text())
    assert {dict(k)["host"] for k in fam["gpuboot_scan_node_verdict"]["samples"]} == {"node1"}


def test_foreign_families_and_duplicates_in_the_previous_file_are_not_carried(tmp_path: Path):
    prom = tmp_path / "gpuboot-scan.prom"
    prom.write_text(
        "# HELP gpuboot_node_verdict old name\n"
        'gpuboot_node_verdict{host="node9",verdict="FAIL"} 1\n'  # a name no longer written
        'gpuboot_scan_node_verdict{host="node9",verdict="FAIL"} 1\n'
        'gpuboot_scan_node_verdict{host="node9",verdict="FAIL"} 0\n'  # hand-edited duplicate
    )
    _path, warning = prometheus.write_merged(
        RunReport.from_dict(scan_report(["node1"], {})), prom, now=NOW
    )
    fam = parse(prom.read_text())
    assert warning is None and "gpuboot_node_verdict" not in fam
    assert fam["gpuboot_scan_node_verdict"]["samples"][(("host", "node9"), ("verdict", "FAIL"))]


def test_label_values_escaped_per_the_exposition_format():
    report = scan_report([ODD], {ODD: "NVL-001"})
    text = prometheus.render(RunReport.from_dict(report), now=NOW, kind=prometheus.SCAN)
    assert 'host="rack\\"1\\\\node\\n7"' in text
    assert "\n7" not in text.replace("\\n7", "")  # no raw newline inside a label
    assert parse(text)["gpuboot_scan_node_verdict"]["samples"][(("host", ODD), ("verdict", "FAIL"))]


def test_fleet_textfiles_pass_promtool_without_duplicate_series(fleet_text):
    scan = prometheus.render(
        RunReport.from_dict(scan_report([f"node{i}" for i in range(1, 301)], {"node7": "NVL-001"})),
        now=NOW,
        kind=prometheus.SCAN,
    )
    for text in (fleet_text, scan):
        parse(text)  # asserts no duplicate series
        result = _promtool(text)
        assert result.returncode == 0, result.stdout + result.stderr
        assert not (result.stdout + result.stderr).strip()  # not even a lint remark


def test_cli_scan_under_limit_keeps_the_other_nodes_in_the_textfile(tmp_path, monkeypatch):
    from gpuboot import cli, scan

    inventory = tmp_path / "fleet.yml"
    inventory.write_text(
        "all:\n  vars:\n    gpuboot_profile: hgx-h100-sxm-8gpu\n"
        '    nvidia_driver_branch: "550"\n    nvidia_driver_version: "550.54.15-1"\n'
        "    ansible_host: 127.0.0.1\n"
        "  children:\n    gpu:\n      hosts:\n        node1:\n        node2:\n"
    )
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    runs = iter([scan_report(["node1", "node2"], {"node2": "NVL-001"}), scan_report(["node1"], {})])

    def fake_scan(_inventory, *, limit=None, **_kw):  # the hosts judged: no ssh here
        report = next(runs)
        assert [n["host"] for n in report["nodes"]] == (["node1"] if limit else ["node1", "node2"])
        report = {**report, "run_dir": str(tmp_path / "run")}
        return scan.ScanResult(RunReport.from_dict(report), scan.History(), tmp_path / "h")

    monkeypatch.setattr(scan, "scan", fake_scan)
    argv = ["scan", "-q", "-i", str(inventory), "--textfile-dir", str(textfiles)]
    assert cli.main(argv) == 1  # node2 fails
    assert cli.main([*argv, "--limit", "node1"]) == 0
    fam = parse((textfiles / "gpuboot-scan.prom").read_text())
    rules = fam["gpuboot_scan_rule_status"]["samples"]
    assert rules[(("host", "node2"), ("rule", "NVL-001"), ("status", "FAIL"))] == 1
    assert rules[(("host", "node1"), ("rule", "NVL-001"), ("status", "PASS"))] == 1


def test_a_dead_node_is_one_series_and_keeps_its_last_judged_time(tmp_path: Path):
    """A node the scan cannot reach is judged on nothing: one node_judged 0 series, no
    rule-ERROR series per rule (thirty alerts for one dead node), and its last-judged time
    stays the one of its last real judgement, so a staleness alert fires on it."""
    prom = tmp_path / "gpuboot-scan.prom"
    earlier = NOW.replace(hour=9)
    prometheus.write_merged(RunReport.from_dict(scan_report(["node1", "node2"], {})), prom,
                            now=earlier)  # fmt: skip
    dead = scan_report(["node1", "node2"], {})
    gone = dead["nodes"][1]
    gone["verdict"] = "ERROR"
    gone["findings"] = [{**f, "status": "ERROR", "reason": "unreachable"} for f in gone["findings"]]
    prometheus.write_merged(RunReport.from_dict(dead), prom, now=NOW, fleet={"node1", "node2"})
    fam = parse(prom.read_text())
    rules = fam["gpuboot_scan_rule_status"]["samples"]
    assert {dict(k)["host"] for k in rules} == {"node1"}
    judged = fam["gpuboot_scan_node_judged"]["samples"]
    assert (judged[(("host", "node1"),)], judged[(("host", "node2"),)]) == (1, 0)
    last = fam["gpuboot_scan_last_judged_timestamp_seconds"]["samples"]
    assert last[(("host", "node1"),)] == NOW.timestamp()
    assert last[(("host", "node2"),)] == earlier.timestamp()
    assert fam["gpuboot_scan_last_scan_timestamp_seconds"]["samples"][(("host", "node2"),)] == (
        NOW.timestamp()
    )


def test_a_node_that_left_the_inventory_leaves_the_textfile(tmp_path: Path):
    prom = tmp_path / "gpuboot-scan.prom"
    prometheus.write_merged(
        RunReport.from_dict(scan_report(["node1", "old9"], {"old9": "NVL-001"})), prom, now=NOW
    )
    prometheus.write_merged(
        RunReport.from_dict(scan_report(["node1"], {})), prom, now=NOW, fleet={"node1"}
    )
    fam = parse(prom.read_text())
    assert {dict(k)["host"] for k in fam["gpuboot_scan_node_verdict"]["samples"]} == {"node1"}


def test_certify_textfile_is_merged_with_its_certificates(tmp_path: Path):
    """certify --textfile-dir: node_certified and the expiry come from the certificates this
    run issued; the nodes a --limit left out keep their series."""
    prom = tmp_path / "gpuboot-certify.prom"
    first = RunReport.from_dict(scan_report(["node1", "node2"], {}))
    prometheus.write_merged(first, prom, now=NOW, kind=prometheus.CERTIFY)
    cert = {"verdict": "PASS", "scope": "full", "missing": [], "expires_at": "2026-12-22T10:00:00Z"}
    again = RunReport.from_dict(scan_report(["node1"], {}))
    prometheus.write_merged(
        again, prom, now=NOW, kind=prometheus.CERTIFY, certificates={"node1": cert},
        fleet={"node1", "node2"},
    )  # fmt: skip
    fam = parse(prom.read_text())
    certified = fam["gpuboot_certify_node_certified"]["samples"]
    assert certified == {(("host", "node1"),): 1, (("host", "node2"),): 0}
    expiry = fam["gpuboot_certify_certificate_expiry_timestamp_seconds"]["samples"]
    assert list(expiry) == [(("host", "node1"),)]


def test_a_fifo_or_an_oversized_previous_file_never_hangs_the_merge(tmp_path: Path, monkeypatch):
    """The previous textfile is read as a regular file within a cap: a FIFO left in the
    collector directory would block a plain read until a writer came."""
    import threading

    prom = tmp_path / "gpuboot-scan.prom"
    os.mkfifo(prom)
    report = RunReport.from_dict(scan_report(["node1"], {}))
    done: list[tuple[str, str | None]] = []
    t = threading.Thread(target=lambda: done.append(prometheus.merge(report, prom, now=NOW)))
    t.start()
    t.join(10)
    if not done:  # unblock the reader so the test process can end
        with open(prom, "wb"):
            pass
    assert done, "merge blocked on a FIFO"
    text, warning = done[0]
    assert warning and "FIFO" in warning and "written afresh" in warning
    assert 'gpuboot_scan_node_verdict{host="node1"' in text
    big = tmp_path / "big.prom"
    big.write_text('gpuboot_scan_node_verdict{host="node9",verdict="FAIL"} 1\n')
    monkeypatch.setattr(prometheus, "MAX_PREVIOUS_BYTES", 16)
    _text, warning = prometheus.merge(report, big, now=NOW)
    assert warning and "16" in warning and "written afresh" in warning
