"""Prometheus textfile for node_exporter's textfile collector (text exposition 0.0.4).

Certify and scan write distinct families (``gpuboot_certify_*``, ``gpuboot_scan_*``): both
files may sit in one collector directory, and the same name with the same labels from two
files is a duplicate series. Units are in the name, never in a label, and base units: every
bandwidth is exported in bytes per second, Gb/s figures (network) included, divided by 8.
(Prometheus's base unit for data is the byte; promtool's lint rejects ``_bits`` names.)

State sets (verdict, rule status): one series per status, 1 for the current one and 0 for
the others, so series never vanish and alerts match on ``{status="FAIL"} == 1``.

A scan under ``--limit`` judges only some nodes: :func:`merge` keeps the previous file's
series of every other node, so their FAIL series (and alerts) do not silently vanish. The
previous file is read only if it is a regular file within ``MAX_PREVIOUS_BYTES`` (a FIFO
left there must not hang a scan). The file is replaced atomically: the collector must never
read half a file.

A certify run's node that passed its checks has its certification scope: ``node_partial``
(1: its certificate is partial) and one ``node_gap`` series per gap scope, labelled with
whether its gpuboot_accept_partial accepts it, so ``node_gap{accepted="false"} == 1`` is
the alert for a node kept out by what its run did not measure.

What a scan did after judging (ScanActions: its breaker, the Kubernetes gate's outcomes, the
cluster's unavailable nodes) is fleet-wide: those series carry no host and each scan's replace
the previous file's.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot.errors import GpubootError
from gpuboot.report._util import (
    ERROR,
    PASS,
    RULE_STATUSES,
    STATUSES,
    WARN,
    atomic_write,
    host_key,
    is_number,
    parse_iso,
    utc_now,
)
from gpuboot.report.certificate import partial
from gpuboot.results import NodeReport, RunReport
from gpuboot.verdict import UNKNOWN

if TYPE_CHECKING:
    from gpuboot.report.extent import Extent

CERTIFY, SCAN = "certify", "scan"
KINDS = (CERTIFY, SCAN)
DRIFT = ("new", "still", "cleared")  # gpuboot.scan.drift's keys

# unit of a measurement -> (metric name suffix, factor to the SI unit)
UNITS = {
    "GB/s": ("bytes_per_second", 1e9),
    "MB/s": ("bytes_per_second", 1e6),
    "GiB/s": ("bytes_per_second", 2.0**30),
    "Gb/s": ("bytes_per_second", 1e9 / 8),
    "Mb/s": ("bytes_per_second", 1e6 / 8),
}
_SUFFIXES = sorted({s for s, _f in UNITS.values()})
GATE_OUTCOMES = ("out", "held", "in_service", "unjudged", "error")
# A collector directory's file of a fleet of thousands of nodes is a few MB: far above, it is
# not one this module wrote.
MAX_PREVIOUS_BYTES = 64 << 20


@dataclass(frozen=True)
class ScanActions:
    """What a scan did after judging, for the fleet-wide series. None: not done this run
    (no kubeconfig, the API server could not say): no sample, never a fake 0."""

    breaker_open: Mapping[str, bool] = field(default_factory=dict)  # rule -> open
    gate: Mapping[str, int] | None = None  # GATE_OUTCOMES -> nodes
    unavailable: Mapping[str, int] | None = None  # cause -> nodes, from the live Node objects
    takeouts_in_window: int | None = None  # gpuboot's own take-outs in the take-out window
    remediation: Mapping[tuple[str, str], int] | None = None  # (step, result) -> how many


def families(kind: str) -> list[tuple[str, str]]:
    """(name, HELP text) of every family a ``kind`` file holds, in file order."""
    p = f"gpuboot_{kind}"
    out = []
    if kind == CERTIFY:
        out.append(
            (
                f"{p}_node_certified",
                "1 if the node holds a gpuboot certificate from this run that certifies it: "
                "full in scope, or partial with every gap accepted by its "
                "gpuboot_accept_partial.",
            )
        )
        out.append(
            (
                f"{p}_node_partial",
                "1 if the node passed its checks but its run measured less than its SKU "
                "requires (a partial certificate), 0 if it measured everything.",
            )
        )
        out.append(
            (
                f"{p}_node_gap",
                "One series per scope of what the node's run did not measure (no-probes, "
                "quick-probes, no-pair, mig, no-tool, unproven); accepted=false: its "
                "gpuboot_accept_partial does not accept it, so the node is not certified.",
            )
        )
    out += [
        (f"{p}_node_verdict", f"Verdict of the node's last {kind} (state set, 1 = current)."),
        (f"{p}_rule_status", f"Status of each rule at the node's last {kind} (state set)."),
    ]
    out += [
        (
            f"{p}_bandwidth_{s}",
            f"Measured bandwidth (median of the probe's samples), in {s.replace('_', ' ')}.",
        )
        for s in _SUFFIXES
    ]
    if kind == CERTIFY:
        out += [
            (
                f"{p}_certificate_expiry_timestamp_seconds",
                "Unix time the node's certificate from this run (full or partial) expires.",
            ),
            (f"{p}_last_run_timestamp_seconds", "Unix time this certify report was written."),
        ]
    else:
        out += [
            (
                f"{p}_drift_rules",
                "Failing rules at the node's last scan by change since the scan before: "
                "new (drift), still (failing at both), cleared.",
            ),
            (f"{p}_last_scan_timestamp_seconds", "Unix time of the node's last scan."),
            (
                f"{p}_node_judged",
                "1 if the scan judged at least one rule on the node, 0 if it could judge "
                "none (unreachable, no evidence): then the node has no rule series.",
            ),
            (
                f"{p}_last_judged_timestamp_seconds",
                "Unix time the node was last judged (carried over while it cannot be): a "
                "dead node's staleness alert fires on it.",
            ),
            (
                f"{p}_escalated_faults",
                "Hardware faults back on the same part after the reboot threshold "
                "(gpuboot.escalation): above 0, the recommended action is hardware "
                "inspection / RMA.",
            ),
            (
                f"{p}_breaker_open",
                "1 while a rule's breaker is open (many nodes failed it for one reason in one "
                "scan: no node is taken out for it until `gpuboot breaker reset`), else 0.",
            ),
            (
                f"{p}_gate_nodes",
                "Nodes the scan's Kubernetes gate handled, by outcome: out (taken out, or "
                "still out), held (failing, held back by the disruption budget, the breaker "
                "or another owner), in_service (passing: released or never out), unjudged "
                "(ERROR only: left as it was), error (the gate could not act on it).",
            ),
            (
                f"{p}_nodes_unavailable",
                "Cluster nodes unavailable to new pods after the scan's gate, by cause "
                "(gpuboot, cordoned, NotReady, Ready Unknown, taint <key>), whoever made "
                "them so.",
            ),
            (
                f"{p}_takeouts_in_window",
                "gpuboot's own take-outs within the take-out window (--takeout-window), as "
                "recorded on the nodes: the disruption gate's --max-new-takeouts counts them.",
            ),
            (
                f"{p}_remediation_steps",
                "Remediation steps `scan --remediate` took in this scan, by step (reconcile, "
                "reset, reboot, reinstall, quarantine) and result.",
            ),
        ]
    return out


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


def judged_any(node: NodeReport) -> bool:
    """Whether any rule was judged on the node (not every finding the harness's ERROR)."""
    return any(f.status != ERROR for f in node.findings)


def _node_samples(
    kind: str, node: NodeReport, cert: dict[str, Any], ts: int, extent: Extent | None = None
) -> dict[str, list[str]]:
    p, host = f"gpuboot_{kind}", node.host
    out: dict[str, list[str]] = {}

    def add(suffix: str, labels: dict[str, Any], value: float | int) -> None:
        out.setdefault(f"{p}_{suffix}", []).append(
            _sample(f"{p}_{suffix}", {"host": host, **labels}, value)
        )

    if kind == CERTIFY:
        valid = cert.get("verdict") in (PASS, WARN)
        certifies = extent.certifies if extent is not None else not partial(cert)
        add("node_certified", {}, int(valid and certifies))
    if kind == CERTIFY and extent is not None:
        add("node_partial", {}, int(bool(extent.gaps)))
        left = set(extent.unaccepted)
        for scope in dict.fromkeys(g.scope for g in extent.gaps):
            add("node_gap", {"gap": scope, "accepted": str(scope not in left).lower()}, 1)
    for status in (*STATUSES, UNKNOWN):  # UNKNOWN: its executor was lost, not judged
        add("node_verdict", {"verdict": status}, int(node.verdict == status))
    seen: set[str] = set()
    judged = judged_any(node)
    # A node judged on nothing (unreachable) is one series saying so, not a rule-ERROR
    # series per rule: thirty alerts for one dead node.
    for f in node.findings if (judged or kind != SCAN) else ():
        if f.rule in seen:  # one series per rule, whatever the input repeats
            continue
        seen.add(f.rule)
        for status in RULE_STATUSES:  # SKIPPED too: a check that did not run is no pass
            add("rule_status", {"rule": f.rule, "status": status}, f.status == status)
    figures: set[str] = set()
    for m in node.measurements:
        # not measured = no sample, never a fake 0; an unknown unit has no SI name to go by
        unit = UNITS.get(m.get("unit") or "")
        if is_number(m.get("value")) and unit and m.get("name") not in figures:
            figures.add(m.get("name"))
            add(f"bandwidth_{unit[0]}", {"figure": m.get("name")}, float(m["value"]) * unit[1])
    if kind == CERTIFY and cert.get("verdict") in (PASS, WARN):  # partial ones expire too
        with contextlib.suppress(KeyError, TypeError, ValueError):  # no expiry: no sample
            expiry = int(parse_iso(cert["expires_at"]).timestamp())
            add("certificate_expiry_timestamp_seconds", {}, expiry)
    if kind == SCAN:
        for change in DRIFT:
            add("drift_rules", {"change": change}, len(getattr(node.drift, change, ())))
        add("last_scan_timestamp_seconds", {}, ts)
        add("node_judged", {}, int(judged))
        if judged:
            add("last_judged_timestamp_seconds", {}, ts)
        add("escalated_faults", {}, len(node.escalations or ()))
    return out


def _action_samples(actions: ScanActions) -> dict[str, list[str]]:
    p = f"gpuboot_{SCAN}"
    out = {
        f"{p}_breaker_open": [
            _sample(f"{p}_breaker_open", {"rule": rule}, bool(is_open))
            for rule, is_open in sorted(actions.breaker_open.items())
        ]
    }
    if actions.gate is not None:
        out[f"{p}_gate_nodes"] = [
            _sample(f"{p}_gate_nodes", {"outcome": o}, int(actions.gate.get(o, 0)))
            for o in GATE_OUTCOMES
        ]
    if actions.unavailable is not None:
        out[f"{p}_nodes_unavailable"] = [
            _sample(f"{p}_nodes_unavailable", {"cause": c}, int(n))
            for c, n in sorted(actions.unavailable.items())
        ]
    if actions.remediation is not None:
        out[f"{p}_remediation_steps"] = [
            _sample(f"{p}_remediation_steps", {"step": step, "result": result}, int(n))
            for (step, result), n in sorted(actions.remediation.items())
        ]
    if actions.takeouts_in_window is not None:
        out[f"{p}_takeouts_in_window"] = [
            _sample(f"{p}_takeouts_in_window", {}, int(actions.takeouts_in_window))
        ]
    return out


def _samples(
    kind: str,
    report: RunReport,
    certificates: dict[str, dict[str, Any]],
    now: datetime,
    actions: ScanActions | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> dict[str, list[str]]:
    if actions is not None and kind != SCAN:
        raise ValueError("only a scan has actions after judging")
    out: dict[str, list[str]] = {name: [] for name, _ in families(kind)}
    ts = int(now.timestamp())
    for node in report.nodes:
        cert = certificates.get(node.host) or {}
        extent = (extents or {}).get(node.host)
        for name, lines in _node_samples(kind, node, cert, ts, extent).items():
            out[name] += lines
    if kind == CERTIFY:
        out["gpuboot_certify_last_run_timestamp_seconds"].append(
            _sample("gpuboot_certify_last_run_timestamp_seconds", {}, ts)
        )
    if actions is not None:
        out.update(_action_samples(actions))
    return out


def _text(kind: str, samples: dict[str, list[str]]) -> str:
    lines: list[str] = []
    for name, text in families(kind):
        lines += [f"# HELP {name} {_help(text)}", f"# TYPE {name} gauge", *samples[name]]
    return "\n".join(lines) + "\n"


def render(
    report: RunReport,
    certificates: dict[str, dict[str, Any]] | None = None,
    *,
    now: datetime | None = None,
    kind: str = CERTIFY,
    actions: ScanActions | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    samples = _samples(kind, report, certificates or {}, now or utc_now(), actions, extents)
    return _text(kind, samples)


def write(
    report: RunReport,
    path: Path | str,
    certificates: dict[str, dict[str, Any]] | None = None,
    *,
    now: datetime | None = None,
    kind: str = CERTIFY,
    actions: ScanActions | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> Path:
    text = render(report, certificates, now=now, kind=kind, actions=actions, extents=extents)
    return atomic_write(Path(path), text.encode())


# ---------------------------------------------------------------- merging a previous file
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LVALUE = r'"(?:[^"\\\n]|\\\\|\\"|\\n)*"'
_LABEL = re.compile(rf"([a-zA-Z_][a-zA-Z0-9_]*)=({_LVALUE})")
_SAMPLE = re.compile(
    rf"^(?P<name>{_NAME})(?:\{{(?P<labels>(?:[a-zA-Z_][a-zA-Z0-9_]*={_LVALUE}"
    rf"(?:,[a-zA-Z_][a-zA-Z0-9_]*={_LVALUE})*)?)\}})? "
    r"(?P<value>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|NaN|Inf))$"
)


class BadTextfile(ValueError):
    """A previous textfile that is not one this module wrote: not merged."""


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value[1:-1])


def _previous(text: str, kind: str) -> dict[str, list[tuple[str, str]]]:
    """family -> [(host, sample line)] of a previous ``kind`` file; BadTextfile if any
    line is not a comment or a well-formed sample of one of our families with a host."""
    known = {name for name, _ in families(kind)}
    out: dict[str, list[tuple[str, str]]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise BadTextfile(f"line {number} is not a sample")
        if m.group("name") not in known:
            continue  # a family this version no longer writes: dropped, not carried on
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        if "host" not in labels:
            continue  # run-wide series: this run's replace them
        out.setdefault(m.group("name"), []).append((_unescape(labels["host"]), line))
    return out


def _read_previous(path: Path) -> bytes:
    """The previous file's bytes (none if there is none): a regular file within
    MAX_PREVIOUS_BYTES, never a link, FIFO or device (GpubootError says which)."""
    from gpuboot.yamlsafe import read_capped_bytes

    if not path.exists() and not path.is_symlink():
        return b""
    hint = "remove it: the next run writes it afresh"
    return read_capped_bytes(path, MAX_PREVIOUS_BYTES, "previous textfile", hint=hint)


def merge(
    report: RunReport,
    previous: Path | str,
    *,
    now: datetime | None = None,
    kind: str = SCAN,
    actions: ScanActions | None = None,
    fleet: set[str] | None = None,
    certificates: dict[str, dict[str, Any]] | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> tuple[str, str | None]:
    """This run's exposition plus the previous file's series of the nodes not in this run
    (text, warning), and the last-judged time of this run's nodes it could not judge.
    ``fleet``: the inventory's hosts; a node that left it is dropped. An unreadable or
    foreign previous file is not merged: the text is this run's alone and the warning
    says why."""
    ours = _samples(kind, report, certificates or {}, now or utc_now(), actions, extents)
    hosts = {n.host for n in report.nodes}
    unjudged = {n.host for n in report.nodes if not judged_any(n)}
    carried = f"gpuboot_{kind}_last_judged_timestamp_seconds"
    previous = Path(previous)
    warning = None
    try:
        kept = _previous(_read_previous(previous).decode("utf-8"), kind)
    except (OSError, GpubootError, UnicodeDecodeError, BadTextfile) as exc:
        warning = f"{previous}: warning: not a gpuboot textfile ({exc}); written afresh"
        kept = {}
    for name, rows in kept.items():
        rows = [
            (h, line)
            for h, line in rows
            if (h not in hosts or (name == carried and h in unjudged))
            and (fleet is None or h in fleet)
        ]
        # one line per series (name and labels): a hand-edited duplicate is dropped
        series: dict[str, str] = {}
        for _h, line in sorted(rows, key=lambda r: host_key(r[0])):
            series.setdefault(line.rsplit(" ", 1)[0], line)
        ours[name] = list(series.values()) + ours[name]
    return _text(kind, ours), warning


def write_merged(
    report: RunReport,
    path: Path | str,
    *,
    now: datetime | None = None,
    kind: str = SCAN,
    actions: ScanActions | None = None,
    fleet: set[str] | None = None,
    certificates: dict[str, dict[str, Any]] | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> tuple[Path, str | None]:
    """Replace ``path`` with :func:`merge`'s text; (path, warning)."""
    text, warning = merge(
        report,
        path,
        now=now,
        kind=kind,
        actions=actions,
        fleet=fleet,
        certificates=certificates,
        extents=extents,
    )
    return atomic_write(Path(path), text.encode("utf-8")), warning
