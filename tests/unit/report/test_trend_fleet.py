"""The trend page at fleet size: past HEAT_NODES nodes a heat map of nodes x scans
(coloured by verdict, only the nodes not passed drawn, worst first) replaces the per-rule
charts, and each node it names links to its own timeline page."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from gpuboot import cli
from gpuboot.report import trend

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _t(i: int) -> str:
    return (T0 + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rec(i, host, failing=None, verdict=None):
    failing = failing or {}
    verdict = verdict or ("FAIL" if "FAIL" in failing.values() else "PASS")
    return {"time": _t(i), "host": host, "verdict": verdict, "failing": failing}


def _fleet(nodes=1000, scans=400):
    """Every node at the first scan; then a point per scan and the nodes that changed (the
    shape a compacted history keeps)."""
    recs = [_rec(0, f"node{n}") for n in range(1, nodes + 1)]
    for i in range(1, scans):
        recs.append(_rec(i, "node1"))
        if i == 100:
            recs.append(_rec(i, "node7", {"XID-001": "FAIL"}))
        if i == 200:
            recs.append(_rec(i, "node9", {"NVL-001": "ERROR"}, "ERROR"))
        if i == 210:
            recs.append(_rec(i, "node9"))
        if i == 390:
            recs.append(_rec(i, "node500", verdict="WARN"))
    return recs


def test_a_thousand_nodes_get_a_heat_map_of_the_nodes_not_passed_not_rule_charts():
    recs = _fleet()
    started = time.monotonic()
    page = trend.render(recs, source="h.jsonl")
    assert time.monotonic() - started < 10
    assert "Nodes by scan" in page and "Failing nodes per rule" not in page
    assert 'class="chart heat"' in page and 'id="rule-' not in page
    assert "997 node(s) passed every scan shown (not drawn)" in page
    assert len(page) < 200_000  # runs of one verdict are one rect: not nodes x scans
    hm = trend.heat(recs)
    assert len(hm["times"]) == trend.HEAT_SCANS and hm["times"][-1] == _t(399)
    assert [h for h, _c in hm["rows"]] == ["node7", "node500", "node9"]  # worst now first
    node9 = dict(hm["rows"])["node9"]
    assert node9.count("ERROR") == 10 and node9[-1] == "PASS"


def test_a_node_first_seen_later_is_blank_before_and_keeps_its_state_after():
    recs = [_rec(i, f"node{n}") for i in range(2) for n in range(1, 40)]
    recs += [_rec(2, "node1"), _rec(2, "new1", {"GPU-001": "FAIL"}), _rec(3, "node1")]
    (row,) = trend.heat(recs)["rows"]
    assert row == ("new1", [None, None, "FAIL", "FAIL"])


def test_a_small_fleet_keeps_its_rule_charts():
    recs = [_rec(0, f"node{n}") for n in range(1, trend.HEAT_NODES + 1)]
    recs.append(_rec(1, "node3", {"NVL-001": "FAIL"}))
    page = trend.render(recs, source="h.jsonl", links={"node3": "trend-nodes/node3.html"})
    assert 'id="rule-NVL-001"' in page and "Nodes by scan" not in page
    assert '<a href="trend-nodes/node3.html">node3</a>' in page


def test_report_trend_writes_a_timeline_page_per_node_it_names(tmp_path, guard, capsys):
    home = tmp_path / "home"
    home.mkdir()
    recs = _fleet(nodes=40, scans=5)
    recs.append(_rec(5, "node7", {"XID-001": "FAIL"}) | {"run_id": "r5", "boot_id": "b1"})
    (home / "scan-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    stale = tmp_path / "out" / trend.NODE_DIR / "gone.html"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    out = tmp_path / "out" / "trend.html"
    assert cli.main(["report", "trend", "-o", str(out), "--json"]) == 0
    page = out.read_text()
    assert '<a href="trend-nodes/node7.html">' in page
    node7 = (out.parent / trend.NODE_DIR / "node7.html").read_text()
    assert "FAIL; new: XID-001" in node7 and '<a href="../trend.html">' in node7
    assert sorted(p.name for p in stale.parent.iterdir()) == ["node7.html"]  # stale one gone
