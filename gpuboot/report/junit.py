"""JUnit XML for CI dashboards: a testsuite per node, a testcase per rule and measurement.

Follows the common (Ant/Jenkins/GitLab) schema: FAIL -> <failure>, ERROR -> <error> (the
harness could not judge; dashboards show it apart from real failures), SKIPPED -> <skipped>
with the reason it did not run (never counted as passed), WARN -> a passed test whose
<system-out> carries the warning, so a WARN never turns a pipeline red.

A certify run adds a testcase "certification scope" per node that passed its checks: a
partial certificate whose gaps the node's gpuboot_accept_partial does not accept is a
<failure type="PARTIAL"> naming what was not measured (a failure is what every CI dashboard
lists and counts; the node is not certified, and certify exits non-zero for it), an accepted
one passes with the accepted gaps in <system-out>; the suite's properties carry ``scope``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot.report._util import (
    ERROR,
    FAIL,
    SKIPPED,
    WARN,
    atomic_write,
    fmt_measure,
    measurement_status,
    xml_safe,
)
from gpuboot.results import RunReport
from gpuboot.verdict import PARTIAL

if TYPE_CHECKING:
    from gpuboot.report.extent import Extent


def _case(suite: ET.Element, host: str, name: str, status: str, message: str, detail: str) -> None:
    case = ET.SubElement(suite, "testcase", classname=xml_safe(host), name=xml_safe(name), time="0")
    if status == FAIL:
        ET.SubElement(case, "failure", message=xml_safe(message), type=FAIL).text = xml_safe(detail)
    elif status == ERROR:
        ET.SubElement(case, "error", message=xml_safe(message), type=ERROR).text = xml_safe(detail)
    elif status == SKIPPED:
        ET.SubElement(case, "skipped", message=xml_safe(message))
    elif status == WARN:
        ET.SubElement(case, "system-out").text = xml_safe(f"WARN: {detail}")


def _measurement_text(m: dict[str, Any]) -> tuple[str, str]:
    unit = m.get("unit")
    value = fmt_measure(m.get("value"), unit)
    bands = ", ".join(
        f"{label} {fmt_measure(m[key], unit)}"
        for key, label in (
            ("fail_below", "fail below"),
            ("warn_below", "warn below"),
            ("physical_limit", "physical limit"),
        )
        if m.get(key) is not None
    )
    status = measurement_status(m)
    if status == ERROR:
        message = f"{m.get('name')}: not measured"
    else:
        message = f"{m.get('name')} = {value}"
        if status in (FAIL, WARN):
            limit = m.get("fail_below" if status == FAIL else "warn_below")
            message += f", below the {status.lower()} threshold {fmt_measure(limit, unit)}"
    extra = [bands] if bands else []
    if m.get("pct_of_limit") is not None:
        extra.append(f"{m['pct_of_limit']}% of the physical limit")
    if m.get("median_of"):
        extra.append(f"median of {m['median_of']} samples: {m.get('samples')}")
    return message, "\n".join([message, *extra])


def _scope_case(suite: ET.Element, host: str, extent: Extent) -> int:
    """The node's certification scope as a testcase; 1 if it is a failure."""
    case = ET.SubElement(
        suite, "testcase", classname=xml_safe(host), name="certification scope", time="0"
    )
    gaps = "\n".join(f"{g.check} ({g.scope}): {g.reason}" for g in extent.gaps)
    if not extent.certifies:
        left = ", ".join(extent.unaccepted)
        ET.SubElement(
            case,
            "failure",
            message=xml_safe(f"partial: not certified for {left} (not measured)"),
            type=PARTIAL,
        ).text = xml_safe(f"{gaps}\npolicy accepts: {', '.join(extent.accepts) or 'nothing'}")
        return 1
    text = f"partial, accepted by policy:\n{gaps}" if extent.gaps else "full"
    ET.SubElement(case, "system-out").text = xml_safe(text)
    return 0


def build(report: RunReport, extents: Mapping[str, Extent] | None = None) -> ET.Element:
    verb = "scan" if any(n.drift is not None for n in report.nodes) else "certify"
    root = ET.Element("testsuites", name=xml_safe(f"gpuboot {verb} {report.run_id or ''}"))
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for node in report.nodes:
        host = node.host
        suite = ET.SubElement(root, "testsuite", name=xml_safe(host), hostname=xml_safe(host))
        props = ET.SubElement(suite, "properties")
        extent = (extents or {}).get(host)
        shown = PARTIAL if extent and not extent.certifies else node.verdict
        ET.SubElement(props, "property", name="verdict", value=xml_safe(shown))
        if extent:
            ET.SubElement(props, "property", name="scope", value=extent.scope)
        counts = {FAIL: 0, ERROR: 0, SKIPPED: 0}
        n = 0
        for f in node.findings:
            detail = f.reason + (f"\naction: {f.action}" if f.action else "")
            fix = node.remedy(f).get("remediate")
            detail += f"\nremediate: {fix}" if fix else ""
            _case(suite, host, f"{f.rule} {f.title}", f.status, f.reason, detail)
            counts[f.status] = counts.get(f.status, 0) + 1
            n += 1
        for m in node.measurements:
            status = measurement_status(m)
            message, detail = _measurement_text(m)
            _case(suite, host, f"measurement {m.get('name')}", status, message, detail)
            counts[status] = counts.get(status, 0) + 1
            n += 1
        if extent:
            counts[FAIL] += _scope_case(suite, host, extent)
            n += 1
        suite.set("tests", str(n))
        suite.set("failures", str(counts[FAIL]))
        suite.set("errors", str(counts[ERROR]))
        suite.set("skipped", str(counts[SKIPPED]))
        suite.set("time", "0")
        totals["tests"] += n
        totals["failures"] += counts[FAIL]
        totals["errors"] += counts[ERROR]
        totals["skipped"] += counts[SKIPPED]
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", str(report.elapsed_s if report.elapsed_s is not None else 0))
    return root


def render(report: RunReport, extents: Mapping[str, Extent] | None = None) -> bytes:
    root = build(report, extents)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write(
    report: RunReport, path: Path | str, *, extents: Mapping[str, Extent] | None = None
) -> Path:
    return atomic_write(Path(path), render(report, extents))
