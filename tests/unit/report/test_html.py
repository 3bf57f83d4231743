"""HTML report: self-contained, escaped, and carrying the verdicts, actions and charts."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from gpuboot.report import html
from gpuboot.report.charts import nice_ticks
from gpuboot.results import RunReport

from .conftest import NOW


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    return p


def test_self_contained_no_scripts_no_external_assets(report):
    page = html.render(RunReport.from_dict(report), now=NOW)
    p = _parse(page)
    tags = {t for t, _ in p.tags}
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert "iframe" not in tags and "object" not in tags
    for _tag, attrs in p.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), name  # no inline handlers
            if name in ("src", "href"):
                raise AssertionError(f"external reference {name}={value}")
    assert "url(" not in page and "@import" not in page


def test_header_summary_and_table(report):
    certs = {
        "gpu-a01": {"expires_at": "2026-12-22T10:20:00Z", "scope": "full", "missing": []},
        "gpu-a02": {"expires_at": "2026-12-22T10:20:00Z", "scope": "partial", "missing": [
            {"check": "BW-005", "reason": "SKIPPED: not applicable: no pair probe"}]},
    }  # fmt: skip
    p = _parse(html.render(RunReport.from_dict(report), certs, now=NOW))
    text = " ".join(p.text)
    assert "20261122T101500-certify-abc123" in text and "2026-11-22T10:20:00Z" in text
    assert "1 of 5 nodes certified, 1 partial" in text
    # a partial certificate with no extent given: its gaps as it names them, not certified
    assert "partial: not certified" in text
    assert "for BW-005 not proven (unproven) (until 2026-12-22)" in text
    rows = [a for t, a in p.tags if t == "tr"]
    # summary (header + 9 problem groups), the 3 nodes not passed, the 2 passing ones
    # (collapsed), all-checks tables (header + 6)
    assert len(rows) == (1 + 9) + (1 + 3) + (1 + 2) + 5 * 7
    assert "until 2026-12-22" in text and "not issued" in text
    # verdict is text, not colour alone
    for word in ("✓ PASS", "⚠ WARN", "✗ FAIL", "⊘ ERROR"):
        assert word in text, word


def test_failures_with_actions(report):
    page = html.render(RunReport.from_dict(report), now=NOW)
    failures = page[page.index("Failures and what to do") : page.index("Verdict per node")]
    assert "GPU 5: 12 of 18 NVLink links inactive (links 6-17)" in failures
    assert "reseat the GPU baseboard; if links stay down, RMA the board" in failures
    assert "enable persistence mode (nvidia-persistenced)" in failures
    assert "12.4 GB/s, below the fail threshold 40 GB/s" in failures
    # failing nodes first, and PASS nodes have no failure card
    assert failures.index("gpu-b07.rack2.example.net") < failures.index("gpu-a03")
    assert "gpu-a01" not in failures


def test_one_chart_per_measurement_with_bands_limit_and_axis(report):
    page = html.render(RunReport.from_dict(report), now=NOW)
    svgs = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    assert len(svgs) == 4
    h2d = next(s for s in svgs if "host_to_device" in s)
    assert h2d.count('fill="#ffe1de"') == 4  # fail band on each measured row (not the ERROR row)
    assert h2d.count('fill="#fff1c2"') == 4
    assert h2d.count('class="limit"') == 4  # physical limit marked per measured row
    assert "nvbandwidth host_to_device_memcpy_ce (GB/s)" in h2d  # axis label with unit
    assert ">12.4 GB/s<" in h2d and "19.7% of limit" in h2d
    assert "not measured (harness error)" in h2d
    nccl = next(s for s in svgs if "all_reduce" in s)
    assert 'class="limit"' not in nccl  # no physical limit given: none drawn
    assert "fail below 350 Gb/s · warn below 380 Gb/s · physical limit 400 Gb/s" in page


def test_machine_text_is_escaped(report):
    evil = '<script>alert("x")</script>'
    report["nodes"][3]["host"] = evil
    report["nodes"][3]["findings"][4]["reason"] = f"{evil} & more"
    page = html.render(RunReport.from_dict(report), now=NOW)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "script" not in {t for t, _ in _parse(page).tags}


def test_without_measurements_there_are_no_charts(report):
    for n in report["nodes"]:
        n.pop("measurements")
    page = html.render(RunReport.from_dict(report), now=NOW)
    assert "<svg" not in page and "Measured bandwidth" not in page
    assert "2 of 5 nodes passed" in page  # no certificates: says what passed instead


def test_nice_ticks():
    assert nice_ticks(416) == [0, 50, 100, 150, 200, 250, 300, 350, 400, 450]
    assert nice_ticks(65) == [0, 10, 20, 30, 40, 50, 60, 70]
    assert nice_ticks(0) == [0.0, 1.0]


def test_a_scan_report_leads_with_its_drift_and_escalations():
    """A scan's page opens with what changed since the last scan, the rules it could not
    judge and the open RMA escalations; a certify page has no such section."""
    from gpuboot.report import html as H
    from gpuboot.results import Drift, Escalation, NodeReport, RunReport

    esc = Escalation("xid:79@0000:3b:00", "Xid 79", "XID-001", 3, None, "RMA", False)
    nodes = (
        NodeReport("node2", "FAIL", (), drift=Drift("t0", new=("NVL-001",)), unjudged=("TOP-001",)),
        NodeReport("node1", "PASS", (), drift=Drift("t0"), escalations=(esc,)),
        NodeReport("node3", "PASS", (), drift=Drift("t0")),
    )
    page = H.render(RunReport("r-scan", None, None, None, None, nodes))
    assert "<title>gpuboot scan r-scan</title>" in page
    drift = page.index("Drift since the last scan")
    assert drift < page.index("<h2>Summary")
    table = page[drift : page.index("</table>", drift)]
    assert table.index("node1") < table.index("node2")  # natural order
    assert "NVL-001" in table and "TOP-001" in table and "xid:79@0000:3b:00" in table
    assert "node3" not in table and "1 other node(s): no change." in page
    certify = H.render(RunReport("r", None, None, None, None, (NodeReport("node1", "PASS", ()),)))
    assert "Drift since" not in certify and "gpuboot certification r" in certify
