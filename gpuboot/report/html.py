"""A self-contained HTML report: inline CSS and SVG, no scripts, no external assets.

Everything that came from a machine (host names, reasons, tool output) is escaped; the
verdict is always written as a word next to its colour and symbol. A certify run's node that
passed its checks but whose certificate is partial with gaps its gpuboot_accept_partial does
not accept is shown PARTIAL ("not certified for" what was not measured), never PASS; what
each node's run measured is listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot import __version__
from gpuboot.report._util import (
    ERROR,
    FAIL,
    PASS,
    RULE_STATUSES,
    SKIPPED,
    STATUSES,
    WARN,
    atomic_write,
    fmt_measure,
    host_key,
    iso,
    measurement_status,
    utc_now,
)
from gpuboot.report.certificate import partial
from gpuboot.report.charts import (
    BAND,
    SYMBOL,
    bar_chart,
    chart_groups,
    distribution_chart,
    outliers,
)
from gpuboot.results import NodeReport, RunReport
from gpuboot.verdict import PARTIAL, UNKNOWN

if TYPE_CHECKING:
    from gpuboot.report.extent import Extent

ORDER = {FAIL: 0, ERROR: 1, WARN: 2, PARTIAL: 3, PASS: 4, SKIPPED: 5}
BAR_ROWS_MAX = 24  # up to this many nodes a chart has a bar per node; beyond, a distribution
BAD = (FAIL, ERROR, WARN)
MEANING = {
    PASS: "every check passed; certified where its certificate is full or its policy "
    "accepts the gaps",
    WARN: "degraded; joins only if policy allows",
    FAIL: "hardware or configuration fault",
    ERROR: "harness could not measure; not a hardware verdict",
}
SKIPPED_MEANING = "a check that did not run (its reason says why): proves nothing"
PARTIAL_MEANING = "passed its checks, but partial: not certified for what its run did not measure"
PARTIAL_SYMBOL = "◐"
UNKNOWN_MEANING = "not judged: its executor was lost before its evidence arrived"
UNKNOWN_SYMBOL = "?"

CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#f6f8fa;
--pass:#116329;--pass-bg:#dafbe1;--warn:#7d4e00;--warn-bg:#fff8c5;
--fail:#a40e26;--fail-bg:#ffebe9;--error:#5a32a3;--error-bg:#f3ecff}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:15px/1.5 "Segoe UI","Liberation Sans","DejaVu Sans",Helvetica,Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:26px;margin:0 0 4px}
h2{font-size:19px;margin:32px 0 12px;padding-bottom:6px;border-bottom:1px solid var(--line)}
h3{font-size:16px;margin:0 0 6px}
code,.mono{font-family:"DejaVu Sans Mono","Liberation Mono",monospace;font-size:13px}
.meta{color:var(--muted);margin:0}
.meta code{color:var(--fg)}
.head{display:flex;justify-content:space-between;align-items:flex-start;gap:24px}
.outcome{padding:10px 16px;border-radius:8px;font-weight:600;white-space:nowrap;border:1px solid}
.cards{display:grid;grid-template-columns:repeat(4,1fr);gap:14px;margin-top:20px}
.card{background:#fff;border:1px solid var(--line);border-left-width:6px;border-radius:8px;
padding:12px 16px}
.card .n{font-size:30px;font-weight:700;line-height:1.1}
.card .what{color:var(--muted);font-size:13px}
.s-PASS{color:var(--pass);border-color:var(--pass)}
.s-WARN{color:var(--warn);border-color:#d4a72c}
.s-FAIL{color:var(--fail);border-color:#ff8182}
.s-ERROR{color:var(--error);border-color:#a371f7}
.s-SKIPPED{color:var(--muted);border-color:var(--line)}
.s-PARTIAL{color:#953800;border-color:#fb8f44}
.badge.s-PARTIAL,.outcome.s-PARTIAL{background:#fff1e5}
.s-UNKNOWN{color:#57606a;border-color:#8c959f}
.badge.s-UNKNOWN,.outcome.s-UNKNOWN{background:#f6f8fa}
.badge{display:inline-block;padding:1px 9px;border-radius:12px;font-weight:700;font-size:13px;
border:1px solid;white-space:nowrap}
.badge.s-PASS,.outcome.s-PASS{background:var(--pass-bg)}
.badge.s-WARN,.outcome.s-WARN{background:var(--warn-bg)}
.badge.s-FAIL,.outcome.s-FAIL{background:var(--fail-bg)}
.badge.s-ERROR,.outcome.s-ERROR{background:var(--error-bg)}
.badge.s-SKIPPED{background:var(--bg)}
table{width:100%;border-collapse:collapse;background:#fff;border:1px solid var(--line);
border-radius:8px;overflow:hidden}
th,td{text-align:left;padding:8px 12px;border-bottom:1px solid var(--line);vertical-align:top}
th{background:#eef1f4;font-size:13px;color:var(--muted);font-weight:600}
tr:last-child td{border-bottom:0}
td.host{font-weight:600;word-break:break-all}
.counts span{margin-right:10px;white-space:nowrap}
.none{color:var(--muted)}
.node{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px 18px;
margin-bottom:14px}
.node h3 .badge{margin-left:8px;vertical-align:1px}
.finding{display:grid;grid-template-columns:92px 1fr;gap:4px 14px;padding:10px 0;
border-top:1px solid var(--line)}
.finding .title{font-weight:600}
.reason{word-break:break-word}
.action{background:#f6f8fa;border-left:3px solid var(--line);padding:4px 10px;margin-top:4px}
.action b{color:var(--fg)}
figure{background:#fff;border:1px solid var(--line);border-radius:8px;margin:0 0 18px;
padding:14px 18px 6px}
figcaption{font-weight:600;margin-bottom:2px}
.legend{color:var(--muted);font-size:13px;margin:0 0 6px}
.sw{display:inline-block;width:14px;height:10px;border:1px solid #0002;margin:0 4px 0 12px;
vertical-align:0}
.sw.limit{width:2px;height:14px;background:#24292f;border:0;vertical-align:-2px}
.chart .grid{stroke:#e6e9ed}.chart .axis{stroke:#59636e}
.chart .tick{fill:#59636e;font-size:12px}.chart .axis-label{fill:#1f2328;font-size:13px}
.chart .host{fill:#1f2328}.chart .limit{stroke:#24292f;stroke-width:2;stroke-dasharray:4 2}
.chart .missing{fill:#5a32a3;font-style:italic}.chart .pct{fill:#59636e}
details{margin-top:8px}summary{cursor:pointer;color:var(--muted)}
footer{margin-top:36px;color:var(--muted);font-size:13px}
.summary td.hosts{width:42%;overflow-wrap:anywhere}
.summary .n{color:var(--muted);white-space:nowrap}
.cards.compact .card{padding:6px 12px}.cards.compact .card .n{font-size:22px}
.cards.compact .what{display:none}
.names{word-break:break-word}
"""


def _e(text: Any) -> str:
    return escape("" if text is None else str(text), quote=True)


def badge(status: str) -> str:
    if status == PARTIAL:
        return f'<span class="badge s-{PARTIAL}">{PARTIAL_SYMBOL} {PARTIAL}</span>'
    status = status if status in RULE_STATUSES else ERROR
    return f'<span class="badge s-{status}">{SYMBOL[status]} {status}</span>'


def shown(n: NodeReport, extents: Mapping[str, Extent]) -> str:
    """The node's verdict as the report shows it: PARTIAL for a node that passed its
    checks whose certification its policy does not accept."""
    e = extents.get(n.host)
    return PARTIAL if e is not None and not e.certifies else n.verdict


def _by_verdict(n: NodeReport) -> tuple[Any, ...]:
    """Failures first, then natural host order (node2 before node10)."""
    return (ORDER.get(n.verdict, 1), host_key(n.host))


def _covered(node: NodeReport) -> set[str]:
    """Rules with a finding not passed: a measurement of such a rule is already told by
    the finding's reason, and is not listed again."""
    return {f.rule for f in node.findings if f.status in (FAIL, ERROR, WARN)}


def _header(
    report: RunReport, now: datetime, certificates: dict[str, Any], extents: Mapping[str, Extent]
) -> str:
    nodes = report.nodes
    told = (*STATUSES, PARTIAL, UNKNOWN)
    counts = {s: sum(1 for n in nodes if shown(n, extents) == s) for s in told}
    # the worst shown verdict; an empty report is PASS
    overall = next((s for s in (FAIL, ERROR, UNKNOWN, WARN, PARTIAL) if counts[s]), PASS)
    elapsed = report.elapsed_s
    run_id = report.run_id if report.run_id is not None else "n/a"
    meta = [f"run <code>{_e(run_id)}</code>", f"generated {iso(now)}"]
    if elapsed is not None:
        meta.append(f"took {_e(elapsed)} s")
    bundle = f"evidence bundle <code>{_e(report.bundle)}</code>" if report.bundle else ""
    meaning = {**MEANING, PARTIAL: PARTIAL_MEANING, UNKNOWN: UNKNOWN_MEANING}
    symbol = {**SYMBOL, PARTIAL: PARTIAL_SYMBOL, UNKNOWN: UNKNOWN_SYMBOL}
    cards = "".join(
        f'<div class="card s-{s}"><div class="n">{counts[s]}</div>'
        f'<div><b>{symbol[s]} {s}</b></div><div class="what">{meaning[s]}</div></div>'
        for s in told
        if s in STATUSES or counts[s]
    )
    # Without a signing key nothing is certified; say what passed instead of "0 certified".
    # A partial certificate certifies only where the node's policy accepts its gaps.
    refused = [h for h in certificates if _refused(h, certificates[h], extents)]
    done, word = (
        (len(certificates) - len(refused), "certified")
        if certificates
        else (counts[PASS], "passed")
    )
    word += f", {len(refused)} partial" if refused else ""
    return (
        '<header><div class="head"><div><h1>GPU node certification report</h1>'
        f'<p class="meta">{" · ".join(meta)}</p><p class="meta">{bundle}</p></div>'
        f'<div class="outcome s-{overall}">{symbol[overall]} {done} of {len(nodes)} '
        f"node{'s' if len(nodes) != 1 else ''} {word}</div></div>"
        f'<div class="cards{" compact" if len(nodes) > BAR_ROWS_MAX else ""}">{cards}</div>'
        "</header>"
    )


def _counts(items: list[str]) -> str:
    parts = [
        f'<span class="s-{s}">{SYMBOL[s]} {items.count(s)} {s.lower()}</span>'
        for s in RULE_STATUSES
        if items.count(s)
    ]
    return (
        f'<span class="counts">{"".join(parts)}</span>' if parts else '<span class="none">—</span>'
    )


def _refused(host: str, cert: dict[str, Any], extents: Mapping[str, Extent]) -> bool:
    """A certificate that does not certify its node: partial and not accepted."""
    e = extents.get(host)
    return (not e.certifies) if e is not None else partial(cert) is not None


def _cert_text(host: str, cert: dict[str, Any] | None, extents: Mapping[str, Extent]) -> str:
    e = extents.get(host)
    if not cert:
        if e is not None and e.gaps:
            return f'<span class="none">not issued</span> (partial: {_e(_gap_words(e))})'
        return '<span class="none">not issued</span>'
    until = f"until {_e(str(cert.get('expires_at'))[:10])}"
    if not _refused(host, cert, extents):
        if e is not None and e.gaps:
            return f"{until}; partial, accepted by its policy: {_e(_gap_words(e))}"
        return until
    what = _gap_words(e, only_refused=True) if e is not None else partial(cert)
    return f'<span class="s-{PARTIAL}">partial: not certified</span> for {_e(what)} ({until})'


def _gap_words(e: Extent, *, only_refused: bool = False) -> str:
    """The gaps by scope: 'BW-005, BW-006 not measured (no-pair)'."""
    left = set(e.unaccepted)
    by_scope: dict[str, list[str]] = {}
    for g in e.gaps:
        if not only_refused or g.scope in left:
            by_scope.setdefault(g.scope, []).append(g.check)
    return "; ".join(f"{', '.join(c)} not measured ({s})" for s, c in by_scope.items())


def _row(n: NodeReport, certificates: dict[str, Any], extents: Mapping[str, Extent]) -> str:
    bad = [f.rule for f in n.findings if f.status in BAD]
    return (
        f'<tr><td class="host">{_e(n.host)}</td><td>{badge(shown(n, extents))}</td>'
        f"<td>{_counts([f.status for f in n.findings])}</td>"
        f"<td>{_counts([measurement_status(m) for m in n.measurements])}</td>"
        f'<td class="mono">{_e(", ".join(bad)) or "<span class=none>—</span>"}</td>'
        f"<td>{_cert_text(n.host, certificates.get(n.host), extents)}</td></tr>"
    )


def _table(
    nodes: tuple[NodeReport, ...], certificates: dict[str, Any], extents: Mapping[str, Extent]
) -> str:
    head = (
        "<table><thead><tr><th>Host</th><th>Verdict</th><th>Rules</th><th>Measurements</th>"
        "<th>Rules not passed</th><th>Certificate</th></tr></thead><tbody>"
    )
    ordered = sorted(nodes, key=lambda n: (ORDER.get(shown(n, extents), 1), host_key(n.host)))
    bad = [n for n in ordered if shown(n, extents) != PASS]
    good = [n for n in ordered if shown(n, extents) == PASS]
    out = "<h2>Verdict per node</h2>"
    if bad:
        out += head + "".join(_row(n, certificates, extents) for n in bad) + "</tbody></table>"
    if good:  # collapsed: at 300 nodes they would push everything else off the page
        rows = "".join(_row(n, certificates, extents) for n in good)
        out += (
            f"<details><summary>{len(good)} passing node{'s' if len(good) != 1 else ''}"
            f"</summary>{head}{rows}</tbody></table></details>"
        )
    return out


def _measured(extents: Mapping[str, Extent]) -> str:
    """What each passing node's run measured, against its profile: collapsed."""
    if not extents:
        return ""
    rows = []
    for host in sorted(extents, key=host_key):
        e = extents[host]
        m = e.measured
        gpus, rails, pairs = m.get("gpus") or {}, m.get("rails") or {}, m.get("pairs") or {}
        got, every = rails.get("measured") or [], rails.get("profile") or []
        scope = (
            "full"
            if not e.gaps
            else f"partial{'' if e.certifies else ', not certified'}: {_gap_words(e)}"
        )
        cells = [
            m.get("probes") or "not recorded",
            m.get("repeats") or 0,
            f"-r {m['dcgm_diag_level']}" if m.get("dcgm_diag_level") else "not run",
            f"{gpus.get('measured') or 0} of {gpus.get('profile') or '?'}",
            f"{len(got)} of {len(every)}" + (f": {', '.join(got)}" if got else ""),
            ", ".join(pairs.get("tcp_bw") or []) or "none",
            ", ".join(pairs.get("ib_write_bw") or []) or "none",
            scope,
        ]
        rows.append(
            f'<tr><td class="host">{_e(host)}</td>'
            + "".join(f"<td>{_e(c)}</td>" for c in cells)
            + "</tr>"
        )
    return (
        "<h2>What each run measured</h2><details><summary>probe level, repeats, DCGM diag, "
        f"GPUs, rails and pair partners of {len(extents)} node(s)</summary><table><thead><tr>"
        "<th>Host</th><th>Probes</th><th>Repeats</th><th>DCGM diag</th><th>GPUs</th>"
        "<th>Rails</th><th>TCP partners</th><th>ib_write_bw partners</th><th>Scope</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></details>"
    )


def _groups(nodes: tuple[NodeReport, ...]) -> list[tuple[str, str, str, list[str]]]:
    """(status, what, title, hosts) for every problem, grouped across nodes: a rule not
    passed, a measurement out of its band that no finding tells, figures not measured."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for n in nodes:
        host = n.host
        covered = _covered(n)
        for f in n.findings:
            if f.status in BAD:
                groups.setdefault((f.status, f.rule, f.title), []).append(host)
        unmeasured = []
        for m in n.measurements:
            if m.get("rule") in covered:
                continue
            status = measurement_status(m)
            if status == ERROR:
                unmeasured.append(str(m.get("name")))
            elif status != PASS:
                title = f"{m.get('name')} below the {status.lower()} threshold"
                groups.setdefault((status, "measurement", title), []).append(host)
        if unmeasured:
            groups.setdefault((ERROR, "not measured", ", ".join(unmeasured)), []).append(host)
        verdict = n.verdict
        if verdict != PASS and not any(host in hosts for hosts in groups.values()):
            # e.g. every check SKIPPED: an ERROR no single rule explains, still on the list
            title = "no failing check explains it (did any check run?)"
            groups.setdefault((verdict if verdict in BAD else ERROR, "verdict", title), []).append(
                host
            )
    return sorted(
        (
            (s, what, title, sorted(hosts, key=host_key))
            for (s, what, title), hosts in groups.items()
        ),
        key=lambda g: (ORDER.get(g[0], 1), -len(g[3]), g[1]),
    )


def _partial_groups(extents: Mapping[str, Extent]) -> list[tuple[str, str, str, list[str]]]:
    """(PARTIAL, gap scope, what, hosts) per gap scope that keeps nodes uncertified."""
    groups: dict[str, list[str]] = {}
    for host, e in extents.items():
        for scope in e.unaccepted:
            groups.setdefault(scope, []).append(host)
    return [
        (PARTIAL, scope, "not certified: not measured, and not accepted by policy", hosts)
        for scope, hosts in sorted(groups.items())
    ]


def _summary(nodes: tuple[NodeReport, ...], extents: Mapping[str, Extent]) -> str:
    groups = _groups(nodes) + _partial_groups(extents)
    if not groups:
        return '<h2>Summary</h2><p class="none">No failures, warnings or errors.</p>'
    rows = "".join(
        f'<tr><td>{badge(s)}</td><td class="mono">{_e(what)}</td><td>{_e(title)}</td>'
        f'<td class="hosts"><span class="n">{len(hosts)} ×</span> '
        f'<span class="mono">{_e(", ".join(hosts))}</span></td></tr>'
        for s, what, title, hosts in groups
    )
    return (
        '<h2>Summary: what failed, on which nodes</h2><table class="summary"><thead><tr>'
        "<th>Status</th><th>Rule</th><th>Check</th><th>Nodes</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _finding(
    status: str, head: str, title: str, reason: str, action: str | None, fix: str | None = None
) -> str:
    act = f'<div class="action"><b>Action:</b> {_e(action)}</div>' if action else ""
    # the tasks tagged with the rule (gpuboot.ids.link_report): the remediation, runnable alone
    if fix:
        act += f'<div class="action"><b>Remediate:</b> <span class="mono">{_e(fix)}</span></div>'
    return (
        f'<div class="finding"><div>{badge(status)}</div><div><div class="title">'
        f'<span class="mono">{_e(head)}</span> {_e(title)}</div>'
        f'<div class="reason">{_e(reason)}</div>{act}</div></div>'
    )


def _failures(nodes: tuple[NodeReport, ...]) -> str:
    cards = []
    for n in sorted(nodes, key=_by_verdict):
        items = []
        covered = _covered(n)
        findings = [f for f in n.findings if f.status not in (PASS, SKIPPED)]
        for f in sorted(findings, key=lambda f: (ORDER.get(f.status, 1), f.rule)):
            fix = n.remedy(f).get("remediate")
            items.append(_finding(f.status, f.rule, f.title, f.reason, f.action, fix))
        missing = []
        for m in n.measurements:
            if m.get("rule") in covered:  # its finding above says it: listed once
                continue
            status = measurement_status(m)
            if status == ERROR:
                missing.append(str(m.get("name")))
            elif status != PASS:
                unit = m.get("unit")
                limit = m.get("fail_below") if status == FAIL else m.get("warn_below")
                reason = (
                    f"{fmt_measure(m.get('value'), unit)}, below the {status.lower()} "
                    f"threshold {fmt_measure(limit, unit)}"
                )
                items.append(_finding(status, "measurement", str(m.get("name")), reason, None))
        if missing:  # one line, not one per probe: they share the harness cause above
            items.append(_finding(ERROR, "measurement", "not measured", "; ".join(missing), None))
        if items:
            cards.append(
                f'<section class="node"><h3>{_e(n.host)}{badge(n.verdict)}</h3>'
                f"{''.join(items)}</section>"
            )
    body = "".join(cards) or '<p class="none">No failures, warnings or errors.</p>'
    return f"<h2>Failures and what to do, per node</h2>{body}"


def _bands_note(rows: list[tuple[str, dict[str, Any]]], unit: str | None) -> str:
    """Caption text: the bands when every node shares them, else say they vary."""
    parts = []
    for key, label in (
        ("fail_below", "fail below"),
        ("warn_below", "warn below"),
        ("physical_limit", "physical limit"),
    ):
        values = {m.get(key) for _h, m in rows}
        if len(values) > 1:
            parts.append(f"{label} varies per node")
        elif (v := values.pop()) is not None:
            parts.append(f"{label} {fmt_measure(v, unit)}")
    medians = sorted({m.get("median_of") for _h, m in rows if m.get("median_of")})
    if medians:
        parts.append(f"median of {'/'.join(map(str, medians))} runs")
    return " · ".join(parts)


def _charts(nodes: tuple[NodeReport, ...]) -> str:
    groups = chart_groups(nodes)
    if not groups:
        return ""
    legend = (
        '<p class="legend">Bars: median measured per node, coloured by status.'
        f'<span class="sw" style="background:{BAND["fail"]}"></span>fail band'
        f'<span class="sw" style="background:{BAND["warn"]}"></span>warn band'
        f'<span class="sw" style="background:{BAND["pass"]}"></span>pass band'
        '<span class="sw limit"></span> physical limit</p>'
    )
    figures = []
    for name, unit, rows in groups:
        if len(rows) <= BAR_ROWS_MAX:
            chart = bar_chart(name, unit, rows)
        else:
            chart = distribution_chart(name, unit, rows) + _named(rows, unit)
        figures.append(
            f'<figure><figcaption>{_e(name)}</figcaption><p class="legend">'
            f"{_e(_bands_note(rows, unit))}</p>{chart}</figure>"
        )
    return "<h2>Measured bandwidth against its bands</h2>" + legend + "".join(figures)


def _named(rows: list[tuple[str, dict[str, Any]]], unit: str | None) -> str:
    """Under a distribution: its outliers and its nodes not measured, by name."""
    out = [
        f"{SYMBOL[measurement_status(m)]} {h} {fmt_measure(m.get('value'), unit)}"
        for h, m in sorted(outliers(rows), key=lambda r: host_key(r[0]))
    ]
    missing = [(h, m) for h, m in rows if m.get("value") is None or measurement_status(m) == ERROR]
    text = ""
    if out:
        text += f'<p class="legend names"><b>Outliers ({len(out)}):</b> {_e(", ".join(out))}</p>'
    if missing:
        names = ", ".join(
            f"{h} ({m['missing']})" if m.get("missing") else h
            for h, m in sorted(missing, key=lambda r: host_key(r[0]))
        )
        text += f'<p class="legend names"><b>Not measured ({len(missing)}):</b> {_e(names)}</p>'
    return text


def _all_checks(nodes: tuple[NodeReport, ...]) -> str:
    parts = []
    for n in sorted(nodes, key=lambda n: host_key(n.host)):
        rows = "".join(
            f'<tr><td class="mono">{_e(f.rule)}</td><td>{badge(f.status)}</td>'
            f'<td>{_e(f.title)}</td><td class="reason">{_e(f.reason)}</td></tr>'
            for f in n.findings
        )
        parts.append(
            f"<details><summary>{_e(n.host)}: {len(n.findings)} checks"
            f"</summary><table><thead><tr><th>Rule</th><th>Status</th><th>Check</th>"
            f"<th>Reason</th></tr></thead><tbody>{rows}</tbody></table></details>"
        )
    return "<h2>All checks</h2>" + "".join(parts) if parts else ""


def is_scan(report: RunReport) -> bool:
    """A scan's report: its nodes carry drift since their previous scan."""
    return any(n.drift is not None for n in report.nodes)


def _drift(nodes: tuple[NodeReport, ...]) -> str:
    """A scan's first section: per node what changed since its previous scan, the rules it
    could not judge and its open RMA escalations; nodes with none of these are counted."""
    rows, quiet = [], 0
    for n in sorted(nodes, key=lambda n: host_key(n.host)):
        d = n.drift
        new, still, cleared = (d.new, d.still, d.cleared) if d else ((), (), ())
        rma = [e.fault for e in n.escalations or ()]
        if not (new or still or cleared or n.unjudged or rma):
            quiet += 1
            continue
        cells = [", ".join(x) or "" for x in (new, still, cleared, n.unjudged, rma)]
        rows.append(
            f"<tr><td>{_e(n.host)}</td>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>"
        )
    if not rows:
        return (
            f'<h2>Drift since the last scan</h2><p class="none">No change on {quiet} node(s).</p>'
        )
    return (
        "<h2>Drift since the last scan</h2><table><thead><tr><th>Node</th><th>New</th>"
        "<th>Still failing</th><th>Cleared</th><th>Not judged</th><th>RMA escalation</th>"
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + (f'<p class="none">{quiet} other node(s): no change.</p>' if quiet else "")
    )


def render(
    report: RunReport,
    certificates: dict[str, dict[str, Any]] | None = None,
    *,
    now: datetime | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> str:
    certificates = certificates or {}
    extents = extents or {}
    nodes = report.nodes
    scan = is_scan(report)
    body = (
        _header(report, now or utc_now(), certificates, extents)
        + (_drift(nodes) if scan else "")
        + _summary(nodes, extents)
        + _failures(nodes)
        + _table(nodes, certificates, extents)
        + _measured(extents)
        + _charts(nodes)
        + _all_checks(nodes)
        + f"<footer>gpuboot {_e(__version__)} · verdicts: "
        + " · ".join(f"{s}: {MEANING[s]}" for s in STATUSES)
        + f" · {SKIPPED}: {SKIPPED_MEANING}"
        + (f" · {PARTIAL}: {PARTIAL_MEANING}" if extents else "")
        + "</footer>"
    )
    title = f"gpuboot {'scan' if scan else 'certification'} {report.run_id or ''}".strip()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}</main></body></html>\n"
    )


def write(
    report: RunReport,
    path: Path | str,
    certificates: dict[str, dict[str, Any]] | None = None,
    *,
    now: datetime | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> Path:
    text = render(report, certificates, now=now, extents=extents)
    return atomic_write(Path(path), text.encode("utf-8"))
