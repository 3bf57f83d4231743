"""`gpuboot status NODE --history`: one node's story, oldest first, read from the kept runs,
the scan history and the remediation history (never from a host)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from gpuboot import cli


def _stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _write(path, doc, when: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    os.utime(path, (_stamp(when), _stamp(when)))


def _scan(time, verdict, failing, boot, faults=(), escalated=(), new=()):
    return {
        "time": time,
        "run_id": f"{time[:10].replace('-', '')}T000000-scan-abcdef",
        "inventory": "inv.yml",
        "host": "node1",
        "verdict": verdict,
        "failing": failing,
        "new": list(new),
        "boot_id": boot,
        "faults": list(faults),
        "escalated": list(escalated),
        "gpus": {},
        "figures": {},
    }


XID = "xid:79@0000:18:00"
FAILING = {"XID-001": "FAIL"}


def _story(tmp_path) -> None:
    runs, home = tmp_path / "runs", tmp_path / "home"
    install = runs / "20261120T080000-install-aaaaaa"
    hosts = {"node1": {"status": "changed", "changed": 7, "ok": 40, "failed": 0}}
    _write(install / "results.json", {"hosts": hosts}, "2026-11-20T08:10:00Z")
    _write(install / "rollout.json", {"check": False}, "2026-11-20T08:10:00Z")
    certify = runs / "20261120T090000-certify-bbbbbb"
    node = {"host": "node1", "verdict": "PASS", "findings": []}
    _write(
        certify / "report.json", {"run_id": certify.name, "nodes": [node]}, "2026-11-20T09:05:00Z"
    )
    cert = {"host": "node1", "scope": "full", "expires_at": "2026-12-20T09:05:00Z"}
    _write(certify / "reports" / "certificates" / "node1.json", cert, "2026-11-20T09:05:00Z")
    lines = [
        _scan("2026-11-21T09:00:00Z", "PASS", {}, "boot-a"),
        _scan("2026-11-22T09:00:00Z", "FAIL", FAILING, "boot-a", [XID], new=["XID-001"]),
        _scan("2026-11-23T09:00:00Z", "FAIL", FAILING, "boot-b", [XID], [XID]),
        {"time": "2026-11-23T12:00:00Z", "host": "node1", "released": True, "by": "ops",
         "reason": "GPU replaced"},
        _scan("2026-11-24T09:00:00Z", "PASS", {}, "boot-c"),
        _scan("2026-11-24T09:00:00Z", "PASS", {}, "boot-x") | {"host": "node2"},
    ]  # fmt: skip
    home.mkdir()
    (home / "scan-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    step = {"host": "node1", "at": int(_stamp("2026-11-22T12:00:00Z")), "step": "reboot",
            "result": "done", "fault": XID}  # fmt: skip
    # `gpuboot node release` records the release in both histories: told once
    release = {"host": "node1", "at": int(_stamp("2026-11-23T12:00:01Z")), "step": "release",
               "result": "done", "fault": "", "by": "ops", "reason": "GPU replaced"}  # fmt: skip
    (home / "remediation-history.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in (step, release))
    )


def test_a_nodes_timeline_tells_its_story_in_order(tmp_path, guard, capsys):
    _story(tmp_path)
    assert cli.main(["status", "node1", "--history", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kinds = [(e["kind"], e["summary"]) for e in doc["entries"]]
    assert [k for k, _ in kinds] == [
        "install",
        "certify",
        "scan",
        "fault",
        "scan",
        "remediation",
        "rebooted",
        "scan",
        "escalation",
        "released",
        "rebooted",
        "scan",
    ]
    summary = dict(enumerate(s for _, s in kinds))
    assert summary[0] == "changed, 7 task(s) changed"
    assert (
        summary[1].startswith("PASS; certificate ") and "(full), expires 2026-12-20" in summary[1]
    )
    assert summary[3] == XID
    assert summary[4] == "FAIL; new: XID-001"
    assert summary[5] == f"reboot: done ({XID})"
    assert summary[6] == "boot id boot-a -> boot-b"
    assert summary[7] == "FAIL; still: XID-001"
    assert summary[8] == f"hardware inspection / RMA: {XID}"
    assert summary[9] == "released by ops: GPU replaced"
    assert summary[11] == "PASS; cleared: XID-001"
    assert doc["entries"][1]["run_id"] == "20261120T090000-certify-bbbbbb"
    assert guard == []  # no host was contacted


def test_a_fault_seen_again_after_a_release_is_told_again(tmp_path, guard, capsys):
    _story(tmp_path)
    history = tmp_path / "home" / "scan-history.jsonl"
    again = _scan("2026-11-25T09:00:00Z", "FAIL", {"XID-001": "FAIL"}, "boot-c", [XID])
    history.write_text(history.read_text() + json.dumps(again) + "\n")
    assert cli.main(["status", "node1", "--history", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert [e["summary"] for e in entries if e["kind"] == "fault"] == [XID, XID]


def test_the_timeline_as_text_and_markdown(tmp_path, guard, capsys, monkeypatch):
    _story(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["status", "node1", "--history"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["time", "kind", "run", "summary"]
    assert max(len(line) for line in lines) <= 80  # fitted to the terminal
    assert cli.main(["status", "node1", "--history", "--format", "markdown"]) == 0
    md = capsys.readouterr().out.splitlines()
    assert md[0] == "| time | kind | run | summary |" and md[1] == "|---|---|---|---|"
    assert "| released | " in md[-3]


def test_a_compacted_history_still_shows_the_scans_where_the_node_changed(tmp_path, guard, capsys):
    from gpuboot import scan

    _story(tmp_path)
    history = tmp_path / "home" / "scan-history.jsonl"
    scan.compact_history(history)
    assert cli.main(["status", "node1", "--history", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    scans = [e for e in entries if e["kind"] == "scan"]
    assert [e["time"] for e in scans if "compacted history" in e["summary"]] == [
        "2026-11-21T09:00:00Z",
        "2026-11-22T09:00:00Z",
        "2026-11-23T09:00:00Z",
    ]  # the last scan is the node's own record, told once
    assert (
        scans[-1]["summary"].startswith("PASS") and "earlier ones compacted" in scans[-1]["summary"]
    )


def test_an_unknown_node_is_bad_input_naming_it_and_how_to_see_the_known_ones(
    tmp_path, guard, capsys
):
    _story(tmp_path)
    assert cli.main(["status", "node9", "--history"]) == 2
    err = capsys.readouterr().err
    assert "'node9'" in err and "gpuboot status" in err


def test_history_without_a_node_asks_for_one(tmp_path, guard, capsys):
    _story(tmp_path)
    assert cli.main(["status", "--history", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert "name the node" in doc["error"]["message"]
    assert doc["error"]["hint"].startswith("gpuboot status node1 --history")


def test_history_with_a_file_still_names_the_scan_history(tmp_path, guard, capsys):
    _story(tmp_path)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(_scan("2026-11-26T09:00:00Z", "PASS", {}, "b") | {"host": "n7"}))
    assert cli.main(["status", "--history", str(other), "--json"]) == 0
    hosts = [n["host"] for n in json.loads(capsys.readouterr().out)["nodes"]]
    assert "n7" in hosts
    assert cli.main(["status", "n7", "--history", str(other), "--json"]) == 0
    assert [e["kind"] for e in json.loads(capsys.readouterr().out)["entries"]] == ["scan"]


def test_a_node_after_history_is_refused_as_a_missing_file_naming_the_fix(
    tmp_path, guard, capsys, monkeypatch
):
    # `--history FILE` names a scan history on every verb: a node there read as an empty
    # file showed nothing and exited 0
    _story(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["status", "--history", "node1", "--json"]) == 2
    err = json.loads(capsys.readouterr().out)["error"]
    assert "no scan history file 'node1'" in err["message"]
    assert str(tmp_path / "node1") in err["message"] and "never a node" in err["message"]
    assert err["hint"].startswith("gpuboot status node1 --history ")
    (tmp_path / "hist.d").mkdir()
    assert cli.main(["status", "node1", "--history", "hist.d"]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert guard == []
