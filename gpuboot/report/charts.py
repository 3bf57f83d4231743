"""Inline SVG charts, one figure per measured quantity: a bar per node for a few nodes,
a distribution (columns sorted by value over the bands) for a fleet.

Thresholds can differ per node (operator overrides per group), so each row draws its own
fail/warn/pass bands and its own physical-limit marker instead of one shared backdrop.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from gpuboot.report._util import (
    ERROR,
    FAIL,
    PASS,
    SKIPPED,
    WARN,
    fmt_measure,
    fmt_num,
    host_key,
    is_number,
    measurement_status,
)
from gpuboot.results import NodeReport

WIDTH = 1120
LABEL_W = 200  # host names
VALUE_W = 190  # value text column on the right
ROW_H = 34
TOP = 12
AXIS_H = 46
PLOT_X0 = LABEL_W
PLOT_X1 = WIDTH - VALUE_W - 16

BAR = {PASS: "#2da44e", WARN: "#bf8700", FAIL: "#cf222e", ERROR: "#8250df"}
BAND = {"fail": "#ffe1de", "warn": "#fff1c2", "pass": "#e2f5e6", "none": "#f0f1f3"}
SYMBOL = {PASS: "✓", WARN: "⚠", FAIL: "✗", ERROR: "⊘", SKIPPED: "○"}


def _e(text: Any) -> str:
    return escape("" if text is None else str(text), quote=True)


def nice_ticks(top: float) -> list[float]:
    """Round ticks 0..>=top: the tightest fit among steps of 1, 2, 2.5 or 5 x 10^k
    giving 4 to 10 intervals (so a 400 limit ends the axis at 450, not 500)."""
    if top <= 0:
        return [0.0, 1.0]
    best: tuple[float, int, float] | None = None
    base = math.floor(math.log10(top))
    for exp in range(base - 2, base + 1):
        for mult in (1, 2, 2.5, 5):
            step = mult * 10**exp
            count = math.ceil(top / step - 1e-9)
            if 4 <= count <= 10 and (best is None or (count * step, count) < best[:2]):
                best = (count * step, count, step)
    assert best is not None  # some step of the three decades always fits
    _end, count, step = best
    return [round(i * step, 10) for i in range(count + 1)]


def _short(host: str, limit: int = 26) -> str:
    return host if len(host) <= limit else host[: limit - 1] + "…"


def bar_chart(name: str, unit: str | None, rows: list[tuple[str, dict[str, Any]]]) -> str:
    """SVG for one quantity; ``rows`` are (host, measurement) pairs."""
    top = max(
        [
            float(m[k])
            for _h, m in rows
            for k in ("value", "physical_limit", "warn_below", "fail_below")
            if is_number(m.get(k))
        ]
        or [1.0]
    )
    ticks = nice_ticks(top * 1.03)
    span = ticks[-1] or 1.0

    def x(v: float) -> float:
        return PLOT_X0 + (PLOT_X1 - PLOT_X0) * min(max(v, 0.0), span) / span

    height = TOP + ROW_H * len(rows) + AXIS_H
    unit_txt = unit or ""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="100%" role="img" aria-label="{_e(name)} per node, in {_e(unit_txt)}" '
        f'class="chart" font-size="13">'
    ]
    # Gridlines and tick labels first, so bands and bars sit on top of the grid.
    axis_y = TOP + ROW_H * len(rows)
    for t in ticks:
        tx = x(t)
        out.append(
            f'<line x1="{tx:.1f}" y1="{TOP}" x2="{tx:.1f}" y2="{axis_y}" class="grid"/>'
            f'<text x="{tx:.1f}" y="{axis_y + 17}" text-anchor="middle" class="tick">'
            f"{_e(fmt_num(t))}</text>"
        )
    out.append(
        f'<line x1="{PLOT_X0}" y1="{axis_y}" x2="{PLOT_X1}" y2="{axis_y}" class="axis"/>'
        f'<text x="{(PLOT_X0 + PLOT_X1) / 2:.1f}" y="{axis_y + 38}" text-anchor="middle" '
        f'class="axis-label">{_e(name)} ({_e(unit_txt or "value")})</text>'
    )
    for i, (host, m) in enumerate(rows):
        y0 = TOP + i * ROW_H
        mid = y0 + ROW_H / 2
        status = measurement_status(m)
        fail_b, warn_b = m.get("fail_below"), m.get("warn_below")
        limit = m.get("physical_limit")
        pass_end = float(limit) if is_number(limit) else span
        edges = [0.0]
        bands = []
        if is_number(fail_b):
            bands.append(("fail", 0.0, float(fail_b)))
            edges.append(float(fail_b))
        if is_number(warn_b):
            bands.append(("warn", edges[-1], float(warn_b)))
            edges.append(float(warn_b))
        bands.append(("pass", edges[-1], max(pass_end, edges[-1])))
        if not is_number(m.get("value")):
            bands = [("none", 0.0, span)]
        for kind, lo, hi in bands:
            if hi > lo:
                out.append(
                    f'<rect x="{x(lo):.1f}" y="{y0 + 3}" width="{x(hi) - x(lo):.1f}" '
                    f'height="{ROW_H - 6}" fill="{BAND[kind]}"/>'
                )
        colour = BAR[status]
        out.append(
            f'<text x="{LABEL_W - 12}" y="{mid + 4.5:.1f}" text-anchor="end" class="host">'
            f"<title>{_e(host)}</title>{_e(_short(host))} "
            f'<tspan fill="{colour}" font-weight="700">{SYMBOL[status]}</tspan></text>'
        )
        value = m.get("value")
        tip = (
            f"{host}: {fmt_measure(value, unit)} — {status}; fail below "
            f"{fmt_measure(fail_b, unit)}, warn below {fmt_measure(warn_b, unit)}, "
            f"physical limit {fmt_measure(limit, unit)}"
            + (f" ({m['physical_limit_source']})" if m.get("physical_limit_source") else "")
        )
        if is_number(value):
            out.append(
                f'<rect x="{PLOT_X0}" y="{mid - 7:.1f}" width="{max(x(value) - PLOT_X0, 1.5):.1f}"'
                f' height="14" rx="2" fill="{colour}"><title>{_e(tip)}</title></rect>'
            )
        else:
            why = f"not measured ({m.get('missing') or 'harness error'})"
            out.append(
                f'<text x="{PLOT_X0 + 8}" y="{mid + 4.5:.1f}" class="missing">'
                f"{_e(_short(why, 90))}<title>{_e(tip)}</title></text>"
            )
        if is_number(limit) and is_number(value):
            lx = x(float(limit))
            out.append(
                f'<line x1="{lx:.1f}" y1="{y0 + 1}" x2="{lx:.1f}" y2="{y0 + ROW_H - 1}" '
                f'class="limit"><title>physical limit {_e(fmt_measure(limit, unit))}</title></line>'
            )
        pct = m.get("pct_of_limit")
        pct_txt = f" · {fmt_num(pct)}% of limit" if is_number(pct) else ""
        value_txt = fmt_measure(value, unit) if is_number(value) else "not measured"
        out.append(
            f'<text x="{PLOT_X1 + 14}" y="{mid + 4.5:.1f}" class="value" fill="{colour}">'
            f'<tspan font-weight="700">{_e(value_txt)}</tspan>'
            f'<tspan class="pct">{_e(pct_txt)}</tspan></text>'
        )
    out.append("</svg>")
    return "".join(out)


def chart_groups(
    nodes: tuple[NodeReport, ...],
) -> list[tuple[str, str | None, list[tuple[str, dict[str, Any]]]]]:
    """(name, unit, rows) per measured quantity, in first-seen order; rows sorted by value
    (lowest first, not measured last). A node with no figure for a quantity others have
    gets a row too, value None and ``missing`` saying why (its rule's finding): a node
    that could not be measured is marked, never silently left out."""
    groups: dict[tuple[str, str | None], list[tuple[str, dict[str, Any]]]] = {}
    for node in nodes:
        for m in node.measurements:
            key = (str(m.get("name")), m.get("unit"))
            groups.setdefault(key, []).append((node.host, m))
    out = []
    for (name, unit), rows in groups.items():
        have = {h for h, _m in rows}
        rule = next((m.get("rule") for _h, m in rows if m.get("rule")), None)
        for node in nodes:
            host = node.host
            if host in have:
                continue
            f = next((f for f in node.findings if f.rule == rule), None)
            why = f"{f.status}: {f.reason}" if f else "no result"
            rows.append((host, {"name": name, "unit": unit, "value": None, "rule": rule,
                                "missing": why}))  # fmt: skip
        rows.sort(key=lambda r: (not is_number(r[1].get("value")), r[1].get("value") or 0,
                                 host_key(r[0])))  # fmt: skip
        out.append((name, unit, rows))
    return out


def outliers(rows: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Measured rows worth naming: out of their pass band, or below 90% of the median."""
    values = sorted(float(m["value"]) for _h, m in rows if is_number(m.get("value")))
    if not values:
        return []
    median = values[len(values) // 2]
    return [
        (h, m)
        for h, m in rows
        if is_number(m.get("value"))
        and (measurement_status(m) != PASS or float(m["value"]) < 0.9 * median)
    ]


DIST_H = 220  # plot height of a distribution
DIST_X0, DIST_X1 = 64, WIDTH - 150  # the right margin holds the "not measured" mark


def distribution_chart(name: str, unit: str | None, rows: list[tuple[str, dict[str, Any]]]) -> str:
    """SVG for one quantity across a fleet: one column per measured node, sorted by value,
    over each node's own bands; not-measured nodes counted in a mark on the right."""
    measured = [(h, m) for h, m in rows if is_number(m.get("value"))]
    missing = len(rows) - len(measured)
    top = max(
        [float(m[k]) for _h, m in rows for k in ("value", "physical_limit", "warn_below")
         if is_number(m.get(k))] or [1.0]
    )  # fmt: skip
    ticks = nice_ticks(top * 1.03)
    span = ticks[-1] or 1.0
    y0, height = TOP, TOP + DIST_H + AXIS_H

    def y(v: float) -> float:
        return y0 + DIST_H - DIST_H * min(max(v, 0.0), span) / span

    col = (DIST_X1 - DIST_X0) / max(len(measured), 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="100%" role="img" aria-label="{_e(name)} across {len(rows)} nodes, sorted by '
        f'value, in {_e(unit or "")}" class="chart dist" font-size="13">'
    ]
    for t in ticks:
        out.append(
            f'<line x1="{DIST_X0}" y1="{y(t):.1f}" x2="{DIST_X1}" y2="{y(t):.1f}" class="grid"/>'
            f'<text x="{DIST_X0 - 8}" y="{y(t) + 4:.1f}" text-anchor="end" class="tick">'
            f"{_e(fmt_num(t))}</text>"
        )
    # Bands: consecutive columns sharing their thresholds are drawn as one rectangle.
    runs: list[list[Any]] = []
    for i, (_h, m) in enumerate(measured):
        key = (m.get("fail_below"), m.get("warn_below"), m.get("physical_limit"))
        if runs and runs[-1][0] == key:
            runs[-1][2] = i + 1
        else:
            runs.append([key, i, i + 1])
    for (fail_b, warn_b, limit), a, b in runs:
        xa, w = DIST_X0 + a * col, (b - a) * col
        lo = 0.0
        for kind, hi in (("fail", fail_b), ("warn", warn_b)):
            if is_number(hi):
                out.append(
                    f'<rect x="{xa:.1f}" y="{y(hi):.1f}" width="{w:.1f}" '
                    f'height="{y(lo) - y(hi):.1f}" fill="{BAND[kind]}"/>'
                )
                lo = float(hi)
        hi = float(limit) if is_number(limit) else span
        out.append(
            f'<rect x="{xa:.1f}" y="{y(hi):.1f}" width="{w:.1f}" height="{y(lo) - y(hi):.1f}" '
            f'fill="{BAND["pass"]}"/>'
        )
        if is_number(limit):
            out.append(
                f'<line x1="{xa:.1f}" y1="{y(limit):.1f}" x2="{xa + w:.1f}" y2="{y(limit):.1f}" '
                f'class="limit"><title>physical limit {_e(fmt_measure(limit, unit))}</title></line>'
            )
    for i, (host, m) in enumerate(measured):
        status = measurement_status(m)
        v = float(m["value"])
        out.append(
            f'<rect x="{DIST_X0 + i * col + col * 0.15:.1f}" y="{y(v):.1f}" '
            f'width="{max(col * 0.7, 1.0):.1f}" height="{max(y(0) - y(v), 1.0):.1f}" '
            f'fill="{BAR[status]}"><title>{_e(host)}: {_e(fmt_measure(v, unit))} — {status}'
            "</title></rect>"
        )
    out.append(
        f'<line x1="{DIST_X0}" y1="{y(0):.1f}" x2="{DIST_X1}" y2="{y(0):.1f}" class="axis"/>'
        f'<text x="{(DIST_X0 + DIST_X1) / 2:.1f}" y="{y(0) + 30:.1f}" text-anchor="middle" '
        f'class="axis-label">{len(measured)} nodes sorted by {_e(name)} '
        f"({_e(unit or 'value')}), lowest first</text>"
    )
    if missing:
        out.append(
            f'<rect x="{DIST_X1 + 16}" y="{y0}" width="{WIDTH - DIST_X1 - 24}" height="{DIST_H}"'
            f' fill="{BAND["none"]}"/><text x="{(DIST_X1 + WIDTH) / 2 + 4:.1f}" '
            f'y="{y0 + DIST_H / 2:.1f}" text-anchor="middle" class="missing">'
            f"{missing} not measured</text>"
        )
    out.append("</svg>")
    return "".join(out)


HEAT_ROW_H = 14  # px a node: a label of 11 px and a gap
HEAT_NONE = "not scanned yet"


def heat_map(
    times: list[str], rows: list[tuple[str, list[str | None]]], links: dict[str, str]
) -> str:
    """Nodes x scans, each cell coloured by the node's verdict at that scan (a node a scan
    under --limit left out keeps its last one); a row's runs of one verdict are one rect, so
    the SVG grows with the changes, not with nodes x scans. ``links``: host -> its page."""
    x0, x1 = LABEL_W + 10, WIDTH - 10
    col = (x1 - x0) / max(1, len(times))
    height = TOP + HEAT_ROW_H * len(rows) + AXIS_H
    body = []
    for i, (host, cells) in enumerate(rows):
        y = TOP + i * HEAT_ROW_H
        label = (
            f'<text x="{LABEL_W}" y="{y + HEAT_ROW_H - 1}" text-anchor="end" class="host">'
            f"{_e(_short(host))}</text>"
        )
        body.append(f'<a href="{_e(links[host])}">{label}</a>' if host in links else label)
        start = 0
        for j in range(1, len(cells) + 1):
            if j < len(cells) and cells[j] == cells[start]:
                continue
            verdict = cells[start]
            fill = BAR.get(verdict, BAND["none"]) if verdict else BAND["none"]
            span = f"{times[start]}" + (f" to {times[j - 1]}" if j - 1 > start else "")
            body.append(
                f'<rect x="{x0 + start * col:.2f}" y="{y}" width="{(j - start) * col:.2f}" '
                f'height="{HEAT_ROW_H - 1}" fill="{fill}"><title>{_e(host)}: '
                f"{_e(verdict or HEAT_NONE)}, {_e(span)}</title></rect>"
            )
            start = j
    base = TOP + HEAT_ROW_H * len(rows) + 4
    for k in range(5 if len(times) > 1 else 1):
        j = round((len(times) - 1) * k / 4) if len(times) > 1 else 0
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        x = x0 + (j + (0 if k == 0 else 1 if k == 4 else 0.5)) * col
        body.append(
            f'<text x="{x:.1f}" y="{base + 14}" text-anchor="{anchor}" class="tick">'
            f"{_e(times[j][5:16].replace('T', ' '))}</text>"
        )
    body.append(
        f'<text x="{(x0 + x1) / 2:.1f}" y="{base + 34}" text-anchor="middle" class="axis-label">'
        f"scans (UTC), oldest left</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'role="img" aria-label="nodes by scan, coloured by verdict" class="chart heat" '
        f'font-size="11">' + "".join(body) + "</svg>"
    )
