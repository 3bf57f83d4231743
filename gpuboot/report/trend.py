"""The fleet trend page from the scan history: per rule, how many nodes fail it over time;
per bandwidth figure, the fleet's median and its 10th-90th percentile band over time.

Each scan's records share one time stamp: a point per scan. A node keeps the state its last
scan gave it (a scan under ``--limit`` changes only its own nodes), and a rule the harness
could not judge (ERROR) keeps its node's last known state, as drift does (gpuboot.scan).
Self-contained HTML like the run report (its CSS, charts.py's axes and colours); no scripts.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from html import escape
from itertools import groupby
from pathlib import Path
from typing import Any

from gpuboot import __version__
from gpuboot.report._util import (
    ERROR,
    FAIL,
    atomic_write,
    fmt_measure,
    fmt_num,
    is_number,
    iso,
    parse_iso,
    utc_now,
)
from gpuboot.report.charts import BAND, BAR, WIDTH, heat_map, nice_ticks
from gpuboot.report.html import CSS
from gpuboot.verdict import VERDICTS, Status

NAME = "trend.html"
# Up to one scalable unit of a GPU pod (a DGX SuperPOD SU is 32 nodes) a chart per rule
# says enough: the few failing nodes are known by name. Past it the question is which
# nodes and since when, and the 30 rule charts count without naming: a heat map of nodes x
# scans replaces them.
HEAT_NODES = 32
HEAT_SCANS = 336  # the map's columns: the last two weeks of hourly scans
HEAT_ROWS = 400  # its rows: the nodes with a scan not PASS in that window, worst first
NODE_DIR = "trend-nodes"  # beside the page: one timeline page per node it names
PLOT_H = 170
X0, X1, Y0 = 64, WIDTH - 24, 12
MARK_POINTS_MAX = 60  # beyond, a line without a dot per scan


def _e(text: Any) -> str:
    return escape("" if text is None else str(text), quote=True)


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (values sorted)."""
    pos = (len(values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def series(records: list[dict[str, Any]]) -> dict[str, Any]:
    """``times`` (one per scan), ``nodes`` (fleet size known then), ``rules``: rule ->
    failing node count per scan (rules that ever failed), ``figures``: (name, unit) ->
    [(time, median, p10, p90, fail_below median, nodes measured)] for scans that measured
    it."""
    state: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    times: list[datetime] = []
    sizes: list[int] = []
    snaps: list[dict[str, int]] = []
    figures: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for stamp, group in groupby(records, key=lambda r: r["time"]):
        try:
            when = parse_iso(stamp)
        except ValueError:
            continue  # a hand-edited time: no place on the axis
        measured: dict[tuple[str, str], list[tuple[float, Any]]] = {}
        for rec in group:
            before = state.get(rec["host"], set())
            kept = {r for r, s in rec["failing"].items() if s == ERROR} & before
            now = {r for r, s in rec["failing"].items() if s == FAIL} | kept
            counts.subtract(before)
            counts.update(now)
            state[rec["host"]] = now
            figs = rec.get("figures") if isinstance(rec.get("figures"), dict) else {}
            for name, fig in figs.items():
                if isinstance(fig, list) and fig and is_number(fig[0]):
                    unit = str(fig[1]) if len(fig) > 1 and fig[1] else ""
                    fail = fig[2] if len(fig) > 2 and is_number(fig[2]) else None
                    measured.setdefault((str(name), unit), []).append((float(fig[0]), fail))
        times.append(when)
        sizes.append(len(state))
        snaps.append({r: n for r, n in counts.items() if n > 0})
        for key, pairs in measured.items():
            values = sorted(v for v, _f in pairs)
            fails = [f for _v, f in pairs if f is not None]
            figures.setdefault(key, []).append(
                (
                    when,
                    statistics.median(values),
                    _percentile(values, 0.1),
                    _percentile(values, 0.9),
                    statistics.median(fails) if fails else None,
                    len(values),
                )
            )
    ever = sorted({r for snap in snaps for r in snap})
    rules = {r: [snap.get(r, 0) for snap in snaps] for r in ever}
    return {"times": times, "nodes": sizes, "rules": rules, "figures": figures}


class _Axes:
    """Time on x, value on y, for one chart (charts.py's ticks and colours)."""

    def __init__(self, times: list[datetime], top: float, *, whole: bool = False):
        self.t0 = times[0]
        span = (times[-1] - times[0]).total_seconds()
        self.span = span or 3600.0  # one scan: a point in the middle of an hour
        if not span:
            self.t0 -= timedelta(seconds=1800)
        self.ticks = nice_ticks(top * 1.05 if top > 0 else 1.0)
        if whole and self.ticks[1] < 1:  # node counts: no tick between two whole nodes
            self.ticks = [float(i) for i in range(int(top) + 2)]
        self.top = self.ticks[-1] or 1.0

    def x(self, t: datetime) -> float:
        return X0 + (X1 - X0) * (t - self.t0).total_seconds() / self.span

    def y(self, v: float) -> float:
        return Y0 + PLOT_H - PLOT_H * min(max(v, 0.0), self.top) / self.top

    def frame(self, label: str) -> list[str]:
        out = []
        for t in self.ticks:
            out.append(
                f'<line x1="{X0}" y1="{self.y(t):.1f}" x2="{X1}" y2="{self.y(t):.1f}" '
                f'class="grid"/><text x="{X0 - 8}" y="{self.y(t) + 4:.1f}" text-anchor="end" '
                f'class="tick">{_e(fmt_num(t))}</text>'
            )
        base = Y0 + PLOT_H
        n = 5
        for i in range(n + 1):
            t = self.t0 + timedelta(seconds=self.span * i / n)
            anchor = "start" if i == 0 else "end" if i == n else "middle"  # inside the frame
            out.append(
                f'<text x="{self.x(t):.1f}" y="{base + 17}" text-anchor="{anchor}" class="tick">'
                f"{_e(t.strftime('%m-%d %H:%M'))}</text>"
            )
        out.append(
            f'<line x1="{X0}" y1="{base}" x2="{X1}" y2="{base}" class="axis"/>'
            f'<text x="{(X0 + X1) / 2:.1f}" y="{base + 38}" text-anchor="middle" '
            f'class="axis-label">{_e(label)}</text>'
        )
        return out


def _svg(label: str, body: list[str]) -> str:
    height = Y0 + PLOT_H + 46
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'role="img" aria-label="{_e(label)}" class="chart trend" font-size="13">'
        + "".join(body)
        + "</svg>"
    )


def rule_chart(rule: str, times: list[datetime], counts: list[int], sizes: list[int]) -> str:
    """Failing node count per scan, as a step line over a shaded area."""
    ax = _Axes(times, float(max(counts)), whole=True)
    body = ax.frame(f"nodes failing {rule}, per scan (UTC)")
    pts: list[str] = []
    for i, (t, n) in enumerate(zip(times, counts, strict=True)):
        if i:
            pts.append(f"{ax.x(t):.1f},{ax.y(counts[i - 1]):.1f}")
        pts.append(f"{ax.x(t):.1f},{ax.y(n):.1f}")
    base = ax.y(0)
    area = (
        f"{ax.x(times[0]):.1f},{base:.1f} " + " ".join(pts) + f" {ax.x(times[-1]):.1f},{base:.1f}"
    )
    body.append(f'<polygon points="{area}" fill="{BAND["fail"]}"/>')
    body.append(
        f'<polyline points="{" ".join(pts)}" fill="none" stroke="{BAR[FAIL]}" stroke-width="2"/>'
    )
    if len(times) <= MARK_POINTS_MAX:
        for t, n, size in zip(times, counts, sizes, strict=True):
            body.append(
                f'<circle cx="{ax.x(t):.1f}" cy="{ax.y(n):.1f}" r="3" fill="{BAR[FAIL]}">'
                f"<title>{_e(iso(t))}: {n} of {size} nodes fail {_e(rule)}</title></circle>"
            )
    return _svg(f"{rule}: failing nodes over time", body)


def figure_chart(name: str, unit: str, points: list[tuple[Any, ...]]) -> str:
    """The fleet's median over its 10th-90th percentile band, per scan that measured it;
    the fail threshold (median of the nodes') dashed."""
    times = [p[0] for p in points]
    top = max([p[3] for p in points] + [p[4] for p in points if p[4] is not None] or [1.0])
    ax = _Axes(times, float(top))
    body = ax.frame(f"{name} ({unit or 'value'}): median and 10th-90th percentile, per scan")
    upper = [f"{ax.x(p[0]):.1f},{ax.y(p[3]):.1f}" for p in points]
    lower = [f"{ax.x(p[0]):.1f},{ax.y(p[2]):.1f}" for p in reversed(points)]
    body.append(f'<polygon points="{" ".join(upper + lower)}" fill="{BAND["pass"]}"/>')
    fails = [(p[0], p[4]) for p in points if p[4] is not None]
    if fails:
        line = " ".join(f"{ax.x(t):.1f},{ax.y(f):.1f}" for t, f in fails)
        body.append(
            f'<polyline points="{line}" fill="none" class="limit" stroke="{BAR[FAIL]}">'
            f"<title>fail below {_e(fmt_measure(fails[-1][1], unit))}</title></polyline>"
        )
    median = " ".join(f"{ax.x(p[0]):.1f},{ax.y(p[1]):.1f}" for p in points)
    body.append(f'<polyline points="{median}" fill="none" stroke="#24292f" stroke-width="2"/>')
    if len(points) <= MARK_POINTS_MAX:
        for t, med, p10, p90, _f, n in points:
            tip = (
                f"{iso(t)}: median {fmt_measure(med, unit)}, 10th-90th percentile "
                f"{fmt_measure(p10, unit)} to {fmt_measure(p90, unit)}, {n} nodes"
            )
            body.append(
                f'<circle cx="{ax.x(t):.1f}" cy="{ax.y(med):.1f}" r="3" fill="#24292f">'
                f"<title>{_e(tip)}</title></circle>"
            )
    return _svg(f"{name} over time", body)


def _verdict(rec: dict[str, Any]) -> str:
    """A record's verdict; a compacted trend record has none: its failing rules give it."""
    if rec.get("verdict") in VERDICTS:
        return rec["verdict"]
    states = set(rec["failing"].values())
    return FAIL if FAIL in states else ERROR if states else Status.PASS


def heat(records: list[dict[str, Any]], scans: int = HEAT_SCANS) -> dict[str, Any]:
    """``times`` (the last ``scans`` scans) and ``rows``: host -> its verdict per scan (None
    before its first), for the nodes with a verdict other than PASS in those scans, worst
    first (bad now, then most scans not passed), at most HEAT_ROWS; ``passed``: how many
    nodes passed every scan shown; ``omitted``: rows past HEAT_ROWS."""
    from gpuboot.report._util import host_key

    groups = []
    for stamp, group in groupby(records, key=lambda r: r["time"]):
        try:
            parse_iso(stamp)
        except ValueError:
            continue  # as series(): no place on the axis
        groups.append((stamp, list(group)))
    start = max(0, len(groups) - scans)
    state: dict[str, str] = {}
    cells: dict[str, list[str | None]] = {}
    for i, (_stamp, group) in enumerate(groups):
        for rec in group:
            state[rec["host"]] = _verdict(rec)
        if i >= start:
            for host, verdict in state.items():
                cells.setdefault(host, [None] * (i - start)).append(verdict)
    bad = {h: c for h, c in cells.items() if any(v not in (None, Status.PASS) for v in c)}
    order = {Status.FAIL: 0, ERROR: 1, Status.WARN: 2}

    def rank(host: str) -> tuple[Any, ...]:
        row = bad[host]
        return (
            order.get(row[-1], 3),
            -sum(v not in (None, Status.PASS) for v in row),
            host_key(host),
        )

    hosts = sorted(bad, key=rank)
    return {
        "times": [stamp for stamp, _g in groups[start:]],
        "rows": [(h, bad[h]) for h in hosts[:HEAT_ROWS]],
        "passed": len(cells) - len(bad),
        "omitted": max(0, len(hosts) - HEAT_ROWS),
    }


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}<footer>gpuboot {_e(__version__)}</footer></main></body></html>\n"
    )


def node_page(host: str, entries: list[dict[str, Any]], *, now: datetime | None = None) -> str:
    """One node's timeline (gpuboot.timeline: `gpuboot status NODE --history`) as a page."""
    rows = "".join(
        f"<tr><td>{_e(e['time'])}</td><td>{_e(e['kind'])}</td><td><code>{_e(e['run_id'] or '')}"
        f"</code></td><td>{_e(e['summary'])}</td></tr>"
        for e in entries
    )
    return _page(
        f"{host}: timeline",
        f'<header><h1>{_e(host)}</h1><p class="meta"><a href="../{NAME}">fleet trend</a> · '
        f"{len(entries)} events, oldest first · <code>gpuboot status {_e(host)} --history</code>"
        f" · generated {iso(now or utc_now())}</p></header><table><thead><tr><th>time</th>"
        f"<th>kind</th><th>run</th><th>summary</th></tr></thead><tbody>{rows}</tbody></table>",
    )


def _heat_section(hm: dict[str, Any], links: dict[str, str]) -> list[str]:
    parts = ["<h2>Nodes by scan</h2>"]
    legend = " · ".join(
        f'<span class="sw" style="background:{c}"></span>{_e(v)}' for v, c in BAR.items()
    )
    note = f"{hm['passed']} node(s) passed every scan shown (not drawn)"
    if hm["omitted"]:
        note += f"; {hm['omitted']} more node(s) not passed beyond the first {HEAT_ROWS}"
    parts.append(f'<p class="legend">{legend} · ERROR: not judged, never a hardware verdict</p>')
    if hm["rows"]:
        parts.append(f"<figure>{heat_map(hm['times'], hm['rows'], links)}</figure>")
    else:
        parts.append('<p class="none">Every node passed every scan shown.</p>')
    parts.append(f'<p class="meta">{_e(note)}</p>')
    return parts


def _rule_section(data: dict[str, Any], links: dict[str, str]) -> list[str]:
    times, sizes = data["times"], data["nodes"]
    parts = ["<h2>Failing nodes per rule over time</h2>"]
    if links:
        named = " · ".join(
            f'<a href="{_e(href)}">{_e(host)}</a>' for host, href in sorted(links.items())
        )
        parts.append(f'<p class="meta">node timelines: {named}</p>')
    rules = sorted(data["rules"].items(), key=lambda kv: (-kv[1][-1], -max(kv[1]), kv[0]))
    if not rules:
        parts.append('<p class="none">No rule failed on any node in these scans.</p>')
    for rule, counts in rules:
        caption = f"{rule}: {counts[-1]} of {sizes[-1]} nodes now, at most {max(counts)}"
        parts.append(
            f'<figure id="rule-{_e(rule)}"><figcaption>{_e(caption)}</figcaption>'
            f"{rule_chart(rule, times, counts, sizes)}</figure>"
        )
    return parts


def render(
    records: list[dict[str, Any]],
    *,
    source: str = "",
    now: datetime | None = None,
    links: dict[str, str] | None = None,
) -> str:
    """The page; past HEAT_NODES nodes a heat map of nodes x scans replaces the per-rule
    charts. ``links``: host -> its timeline page (relative), for the nodes the page names."""
    links = links or {}
    data = series(records)
    times, sizes = data["times"], data["nodes"]
    meta = f"{len(times)} scans"
    if times:
        meta += f" from {iso(times[0])} to {iso(times[-1])}, {sizes[-1]} nodes"
    parts = [
        "<header><h1>GPU fleet trend</h1>"
        f'<p class="meta">scan history <code>{_e(source)}</code> · {_e(meta)} · generated '
        f"{iso(now or utc_now())}</p></header>"
    ]
    if times and sizes[-1] > HEAT_NODES:
        parts += _heat_section(heat(records), links)
    else:
        parts += _rule_section(data, links)
    parts.append("<h2>Measured bandwidth over time</h2>")
    if not data["figures"]:
        parts.append(
            '<p class="none">No scan measured bandwidth (scans run <code>--probes none</code> '
            "by default; <code>--probes quick</code> measures).</p>"
        )
    for (name, unit), points in sorted(data["figures"].items()):
        last = points[-1]
        caption = (
            f"{name}: median {fmt_measure(last[1], unit)} at the last measuring scan "
            f"({last[5]} nodes)"
        )
        parts.append(
            f'<figure id="figure-{_e(name)}"><figcaption>{_e(caption)}</figcaption>'
            f'<p class="legend"><span class="sw" style="background:{BAND["pass"]}"></span>'
            "10th-90th percentile of the nodes measured · line: median · dashed: fail "
            f"threshold</p>{figure_chart(name, unit, points)}</figure>"
        )
    return _page("gpuboot fleet trend", "".join(parts))


def shown_nodes(records: list[dict[str, Any]]) -> set[str]:
    """The nodes the page names: the heat map's rows past HEAT_NODES, else every node."""
    data = series(records)
    if data["times"] and data["nodes"][-1] > HEAT_NODES:
        return {h for h, _c in heat(records)["rows"]}
    return {r["host"] for r in records}


def write(
    records: list[dict[str, Any]],
    path: Path,
    *,
    source: str,
    now: datetime | None = None,
    timelines: Callable[[set[str]], dict[str, list[dict[str, Any]]]] | None = None,
) -> Path:
    """Render the trend page of a history's ``records`` (scan.History.trend, read by the
    caller: a scan passes the one it holds) into ``path`` (atomically); with ``timelines``
    (hosts -> each one's entries: gpuboot.timeline.timelines), a page per node it names in
    NODE_DIR beside it, linked from the page (pages of nodes no longer named removed)."""
    links = _write_node_pages(Path(path).parent / NODE_DIR, records, timelines, now)
    text = render(records, source=source, now=now, links=links)
    return atomic_write(Path(path), text.encode("utf-8"))


def _write_node_pages(folder: Path, records, timelines, now) -> dict[str, str]:
    from gpuboot.bundle.names import is_safe_name

    if timelines is None:
        return {}
    hosts = {h for h in shown_nodes(records) if is_safe_name(h)}
    entries = timelines(hosts) if hosts else {}
    links = {}
    for host, events in entries.items():
        if events:
            atomic_write(folder / f"{host}.html", node_page(host, events, now=now).encode())
            links[host] = f"{NODE_DIR}/{host}.html"
    if folder.is_dir() and not folder.is_symlink():
        for old in folder.glob("*.html"):
            if old.stem not in links and old.is_file():
                old.unlink(missing_ok=True)
    return links
