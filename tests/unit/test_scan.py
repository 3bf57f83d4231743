"""The scan's memory: drift against each node's previous scan, and the history file."""

from __future__ import annotations

from gpuboot.results import NodeReport
from gpuboot.scan import append_history, drift, last_records


def _rec(host, failing_rules, time="2026-11-23T10:00:00Z"):
    return {"time": time, "host": host, "verdict": "FAIL", "failing": failing_rules}


def test_first_scan_reports_every_failure_as_new_but_not_what_it_could_not_judge():
    d = drift({"NVL-001": "FAIL", "BW-001": "ERROR"}, None).to_dict()
    assert d == {"previous_scan": None, "new": ["NVL-001"], "still": [], "cleared": []}


def test_drift_splits_new_still_and_cleared():
    before = _rec("n1", {"NVL-001": "FAIL", "STK-002": "FAIL"})
    d = drift({"NVL-001": "FAIL", "XID-001": "FAIL"}, before).to_dict()
    assert (d["new"], d["still"], d["cleared"]) == (["XID-001"], ["NVL-001"], ["STK-002"])
    assert d["previous_scan"] == "2026-11-23T10:00:00Z"


def test_failing_keeps_fail_and_error_only():
    statuses = (("A", "PASS"), ("B", "WARN"), ("C", "FAIL"), ("D", "ERROR"))
    node = {"findings": [{"rule": r, "status": s} for r, s in statuses]}
    assert NodeReport.from_dict(node).failing() == {"C": "FAIL", "D": "ERROR"}


def test_history_keeps_the_latest_record_per_host_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "h" / "scan-history.jsonl"
    assert last_records(path) == {}
    append_history(path, [_rec("n1", {"A": "FAIL"}), _rec("n2", {})])
    append_history(path, [_rec("n1", {}, time="2026-11-23T11:00:00Z")])
    with open(path, "a") as fh:
        fh.write('{"time": "2026-11-23T12:00:00Z", "host": "n2", "fail')  # killed mid-write
    last = last_records(path)
    assert last["n1"]["time"] == "2026-11-23T11:00:00Z" and last["n1"]["failing"] == {}
    assert last["n2"]["time"] == "2026-11-23T10:00:00Z"
    # the next scan's line starts on a line of its own: the torn one does not swallow it
    append_history(path, [_rec("n2", {"B": "FAIL"}, time="2026-11-23T13:00:00Z")])
    assert last_records(path)["n2"]["failing"] == {"B": "FAIL"}
