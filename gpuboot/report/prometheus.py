"""Prometheus textfile for node_exporter's textfile collector (text exposition 0.0.4).

``gpuboot_rule_status`` is a state set: one series per status with value 1 for the
current one and 0 for the others, so series never vanish and alerts can match on
``{status="FAIL"} == 1``. The file is replaced atomically: the collector must never
read half a file.
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuboot.report._util import (
    PASS,
    RULE_STATUSES,
    STATUSES,
    WARN,
    atomic_write,
    is_number,
    parse_iso,
    utc_now,
)
from gpuboot.report.certificate import partial

_FAMILIES = (
    (
        "gpuboot_node_certified",
        "1 if the node holds a full-scope gpuboot certificate from this run (a partial one, "
        "short of the probes its SKU requires, does not count).",
    ),
    ("gpuboot_node_verdict", "Verdict of the node's last certification (state set)."),
    ("gpuboot_rule_status", "Status of each certification rule (state set, 1 = current)."),
    ("gpuboot_measurement", "Measured figure (median of the probe's samples), in `unit`."),
    (
        "gpuboot_certificate_expiry_timestamp_seconds",
        "Unix time the node's certificate from this run (full or partial) expires.",
    ),
    ("gpuboot_last_run_timestamp_seconds", "Unix time this certification report was written."),
)


def escape_label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(v: float | int) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _sample(name: str, labels: dict[str, Any], value: float | int) -> str:
    body = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
    return f"{name}{{{body}}} {_value(value)}" if body else f"{name} {_value(value)}"


def _samples(
    report: dict[str, Any], certificates: dict[str, dict[str, Any]], now: datetime
) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {name: [] for name, _ in _FAMILIES}
    for node in report.get("nodes", []):
        host = node.get("host", "")
        cert = certificates.get(host) or {}
        certified = cert.get("verdict") in (PASS, WARN) and partial(cert) is None
        out["gpuboot_node_certified"].append(
            _sample("gpuboot_node_certified", {"host": host}, int(certified))
        )
        for status in STATUSES:
            out["gpuboot_node_verdict"].append(
                _sample(
                    "gpuboot_node_verdict",
                    {"host": host, "verdict": status},
                    int(node.get("verdict") == status),
                )
            )
        for f in node.get("findings", []):
            for status in RULE_STATUSES:  # SKIPPED too: a check that did not run is no pass
                out["gpuboot_rule_status"].append(
                    _sample(
                        "gpuboot_rule_status",
                        {"host": host, "rule": f.get("rule"), "status": status},
                        int(f.get("status") == status),
                    )
                )
        for m in node.get("measurements") or []:
            if is_number(m.get("value")):  # not measured = no sample, never a fake 0
                labels = {"host": host, "name": m.get("name"), "unit": m.get("unit") or ""}
                out["gpuboot_measurement"].append(
                    _sample("gpuboot_measurement", labels, m["value"])
                )
        if cert.get("verdict") in (PASS, WARN):  # partial ones expire too
            try:
                expiry = parse_iso(cert["expires_at"]).timestamp()
            except (KeyError, TypeError, ValueError):
                continue
            out["gpuboot_certificate_expiry_timestamp_seconds"].append(
                _sample("gpuboot_certificate_expiry_timestamp_seconds", {"host": host}, int(expiry))
            )
    out["gpuboot_last_run_timestamp_seconds"].append(
        _sample("gpuboot_last_run_timestamp_seconds", {}, int(now.timestamp()))
    )
    return out


def render(
    report: dict[str, Any],
    certificates: dict[str, dict[str, Any]] | None = None,
    *,
    now: datetime | None = None,
) -> str:
    samples = _samples(report, certificates or {}, now or utc_now())
    lines: list[str] = []
    for name, text in _FAMILIES:
        lines += [f"# HELP {name} {_help(text)}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"


def write(
    report: dict[str, Any],
    path: Path | str,
    certificates: dict[str, dict[str, Any]] | None = None,
    *,
    now: datetime | None = None,
) -> Path:
    return atomic_write(Path(path), render(report, certificates, now=now).encode("utf-8"))
