"""The HTML report at 300 nodes: a summary first with every problem grouped by rule, detail
only for nodes not passed, charts as distributions that name their outliers and the nodes
not measured, each bandwidth failure told once."""

from __future__ import annotations

import re
from html import unescape

import pytest

from gpuboot.report import html
from gpuboot.results import RunReport

from .conftest import NOW
from .fleet import FAILING, HARNESS, NVLINK_DOWN, ODD_NAME, SLOW_H2D, WARNED, fleet_report


@pytest.fixture(scope="module")
def page() -> str:
    return html.render(RunReport.from_dict(fleet_report()), now=NOW)


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end)]


def _summary_rows(page: str) -> list[str]:
    table = _section(page, 'class="summary"', "</table>")
    return [unescape(re.sub(r"<[^>]+>", " ", r)) for r in table.split("<tr>")[2:]]


def test_summary_comes_first_and_names_every_failing_node(page):
    summary = page.index("Summary")
    assert summary < page.index("Failures and what to do") < page.index("Verdict per node")
    assert page.index("Verdict per node") < page.index("<svg")
    head = unescape(page[: page.index("Failures and what to do")])
    for host in FAILING + WARNED:
        assert re.search(rf"\b{host}\b", head[summary:]), host


def test_failures_grouped_by_rule_in_natural_host_order(page):
    rows = _summary_rows(page)
    nvl = [r for r in rows if "NVL-001" in r]
    assert len(nvl) == 1  # one row per rule, not one per node
    assert "3 ×" in nvl[0] and "node7, node42, node260" in nvl[0]  # node7 < node42 < node260
    stk = next(r for r in rows if "STK-001" in r)
    assert "node2, node10" in stk  # natural order, not node10, node2
    statuses = [r.split()[1] for r in rows]  # badge: symbol, then the word
    assert statuses == sorted(statuses, key=["FAIL", "ERROR", "WARN"].index)  # failures first


def test_detail_only_for_nodes_not_passed_passing_nodes_collapsed(page):
    cards = re.findall(r'<section class="node"><h3>([^<]*)<', page)
    assert cards == [*sorted(NVLINK_DOWN + SLOW_H2D + ["node13"], key=lambda h: int(h[4:])),
                     *HARNESS[::-1], *WARNED]  # fmt: skip
    passing = _section(page, "passing nodes</summary>", "</details>")
    assert page[: page.index("passing nodes</summary>")].rfind("<details>") > page.index(
        "Verdict per node"
    )
    assert passing.count("<tr>") == 1 + 300 - len(FAILING) - len(WARNED)
    assert html._e(ODD_NAME) in passing and ODD_NAME not in page  # escaped


def test_bandwidth_failure_listed_once(page):
    for host in SLOW_H2D:
        card = page[page.index(f'<section class="node"><h3>{host}<') :]
        card = card[: card.index("</section>")]
        # BW-001's finding only, not again as a "measurement" item
        assert card.count('class="finding"') == 1 and "BW-001" in card, card
    rows = [r for r in _summary_rows(page) if any(re.search(rf"\b{h}\b", r) for h in SLOW_H2D)]
    assert len(rows) == 1 and "BW-001" in rows[0]


def test_charts_are_distributions_sorted_by_value_naming_outliers_and_unmeasured(page):
    figures = re.findall(r"<figure>.*?</figure>", page, flags=re.S)
    assert len(figures) == 3
    for fig in figures:
        svg = fig[fig.index("<svg") : fig.index("</svg>")]
        assert svg.count("<rect") < 400  # one column per node, bands merged: not 300 rows
        values = [float(v) for v in re.findall(r"<title>[^<:]*: ([\d.]+) G", svg)]
        assert len(values) == 300 - len(HARNESS) and values == sorted(values)
        assert "2 not measured" in svg  # the mark in the chart
        named = unescape(re.sub(r"<[^>]+>", "", fig[fig.index("</svg>") :]))
        assert re.search(r"Not measured \(2\): node2 \(ERROR: [^)]*\), node10 \(ERROR", named)
    h2d = unescape(figures[0])
    assert "Outliers" in h2d
    for host in SLOW_H2D:
        assert re.search(rf"✗ {host} 1[34]\.\d+ GB/s", h2d), host
    assert len(page) < 4_000_000  # a 300-node report stays a file one can mail


def test_small_report_keeps_a_bar_per_node_sorted_by_value():
    page = html.render(RunReport.from_dict(fleet_report(12)), now=NOW)
    h2d = re.findall(r"<svg.*?</svg>", page, flags=re.S)[0]
    hosts = re.findall(r'class="host"><title>([^<]*)</title>', h2d)
    assert hosts[-2:] == ["node2", "node10"]  # not measured: marked, last
    assert "not measured (ERROR: cannot judge: nvbandwidth_h2d missing)" in h2d
    values = [float(v) for v in re.findall(r'font-weight="700">([\d.]+) GB/s<', h2d)]
    assert len(values) == 10 and values == sorted(values)


def test_a_node_not_passed_without_a_failing_finding_is_still_in_the_summary():
    report = fleet_report(3)
    node = report["nodes"][2]  # node3: nothing ran, so the engine's verdict is ERROR
    node.update(verdict="ERROR", measurements=[])
    for f in node["findings"]:
        f.update(status="SKIPPED", reason="not applicable: probe level none")
    rows = _summary_rows(html.render(RunReport.from_dict(report), now=NOW))
    assert any("node3" in r and "ERROR" in r and "verdict" in r for r in rows), rows
