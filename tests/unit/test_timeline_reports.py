"""The certify runs in a node's timeline, read from kept report.json files as certify
writes them: the verdict, the FAIL and ERROR rule ids (sorted, once each), the
certificate; a run of other nodes, a torn report and a name only quoted in a finding add
nothing. Pinned byte for byte: `status NODE --history`, its table and its trend page."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from gpuboot import cli, timeline
from gpuboot.report import trend


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _finding(rule: str, status: str, reason: str = "ok") -> dict:
    return {"rule": rule, "title": f"{rule} title", "status": status, "reason": reason,
            "action": "", "severity": "FAIL", "applicable": True}  # fmt: skip


def _certify(runs, run_id: str, nodes: list[dict], when: str, text: str | None = None):
    run_dir = runs / run_id
    run_dir.mkdir(parents=True)
    doc = {"run_id": run_id, "run_dir": str(run_dir), "bundle": str(run_dir / "bundle"),
           "elapsed_s": 1.0, "passed": False, "probes": None, "nodes": nodes}  # fmt: skip
    report = run_dir / "report.json"
    report.write_text(json.dumps(doc, indent=2) if text is None else text)  # as certify does
    os.utime(report, (_stamp(when), _stamp(when)))
    return run_dir


def _node(host: str, verdict: str, findings: list[dict]) -> dict:
    measurements = [{"rule": "NVL-001", "name": "nvlink_bw", "median": 400.0, "peer": "node1"}]
    return {"host": host, "verdict": verdict, "findings": findings,
            "measurements": measurements, "executor": "controller"}  # fmt: skip


def _runs(tmp_path) -> None:
    runs = tmp_path / "runs"
    failed = [
        _finding("STK-001", "PASS"),
        _finding("NVL-001", "FAIL", "2 links down"),
        _finding("DCG-001", "ERROR", "dcgmi did not answer"),
        _finding("THR-001", "WARN"),
        _finding("NVL-001", "FAIL", "again"),  # one rule failed twice: told once
        _finding("BW-006", "SKIPPED"),
    ]
    first = _certify(
        runs,
        "20261120T090000-certify-aaaaaa",
        [_node("node1", "FAIL", failed), _node("node2", "PASS", [_finding("STK-001", "PASS")])],
        "2026-11-20T09:05:00Z",
    )
    certs = first / "reports" / "certificates"
    certs.mkdir(parents=True)
    cert = {"host": "node1", "scope": "partial", "expires_at": "2026-12-20T09:05:00Z"}
    (certs / "node1.json").write_text(json.dumps(cert))
    (certs / "node2.json").write_text(json.dumps(cert | {"host": "node2"}))
    # other nodes only, node1 named in a measurement: nothing for node1
    _certify(
        runs,
        "20261121T090000-certify-bbbbbb",
        [_node("node7", "PASS", [])],
        "2026-11-21T09:05:00Z",
    )
    # a reason with a quote and a backslash (escapes in the text): read all the same
    quoted = _finding("DCG-001", "ERROR", 'dcgmi said "C:\\diag" failed')
    _certify(
        runs,
        "20261122T090000-certify-cccccc",
        [_node("node1", "ERROR", [quoted, _finding("STK-001", "PASS")])],
        "2026-11-22T09:05:00Z",
    )
    # torn mid-write: passed over
    _certify(runs, "20261123T090000-certify-dddddd", [], "2026-11-23T09:05:00Z", '{"nodes": [{"ho')
    _certify(
        runs,
        "20261124T090000-certify-eeeeee",
        [_node("node1", "PASS", [_finding("STK-001", "PASS")])],
        "2026-11-24T09:05:00Z",
    )
    (tmp_path / "home").mkdir()


def test_certify_runs_in_a_timeline_are_told_byte_for_byte(tmp_path, guard, capsys):
    _runs(tmp_path)
    certs = tmp_path.resolve() / "runs" / "20261120T090000-certify-aaaaaa" / "reports"
    cert = certs / "certificates" / "node1.json"
    assert cli.main(["status", "node1", "--history", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert entries == [
        {
            "time": "2026-11-20T09:05:00Z",
            "kind": "certify",
            "run_id": "20261120T090000-certify-aaaaaa",
            "summary": f"FAIL (DCG-001 NVL-001); certificate {cert} (partial), "
            "expires 2026-12-20T09:05:00Z",
        },
        {
            "time": "2026-11-22T09:05:00Z",
            "kind": "certify",
            "run_id": "20261122T090000-certify-cccccc",
            "summary": "ERROR (DCG-001)",
        },
        {
            "time": "2026-11-24T09:05:00Z",
            "kind": "certify",
            "run_id": "20261124T090000-certify-eeeeee",
            "summary": "PASS",
        },
    ]
    now = datetime(2026, 11, 25, tzinfo=UTC)
    page = trend.node_page("node1", timeline.timelines({"node1"})["node1"], now=now)
    assert (
        "<tr><td>2026-11-22T09:05:00Z</td><td>certify</td>"
        "<td><code>20261122T090000-certify-cccccc</code></td><td>ERROR (DCG-001)</td></tr>"
    ) in page
    assert "3 events, oldest first" in page and "generated 2026-11-25T00:00:00Z" in page
    assert guard == []


def test_a_fleets_timelines_read_each_kept_run_once_for_every_node(tmp_path, guard):
    _runs(tmp_path)
    lines = timeline.timelines({"node1", "node2", "node7", "node8", "node9"})
    assert sorted(lines) == ["node1", "node2", "node7"]  # node8, node9: nothing kept names them
    # a name written with escapes (another JSON writer) is the same name
    escaped = json.dumps({"nodes": [_node("node9", "FAIL", [_finding("X-1", "FAIL")])]})
    escaped = escaped.replace('"node9"', '"\\u006eode9"')
    _certify(
        tmp_path / "runs", "20261125T090000-certify-ffffff", [], "2026-11-25T09:05:00Z", escaped
    )
    lines = timeline.timelines({"node1", "node2", "node7", "node8", "node9"})
    assert [e["summary"] for e in lines["node9"]] == ["FAIL (X-1)"]
    assert [e["summary"] for e in lines["node7"]] == ["PASS"]
    assert lines["node2"][0]["summary"].startswith("PASS; certificate ")
    assert len(lines["node1"]) == 3
