"""`gpuboot status`: the fleet at a glance, from what the controller already keeps (no SSH).

Per node: its last certify verdict and time, its certificate's expiry (days left), its
stack, its last scan's time, the rules failing then and any RMA escalation. Sources: the
kept certify runs (``runs/<id>/report.json``, ``reports/certificates/<host>.json``, the
bundle's meta.json for the stack) and the scan history. A scan runs certify's engine, so
its run directories look like certify's: the run ids the scan history names are skipped.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import ConfigError
from gpuboot.report._util import host_key, iso, parse_iso, utc_now
from gpuboot.verdict import BAD, Status
from gpuboot.yamlsafe import decode_utf8, loads_json_bounded, read_capped_bytes, read_capped_json

REPORT = "report.json"
CERT_DIR = Path("reports") / "certificates"


# What gpuboot writes there stays far below these; a file past them, a link, a FIFO or a
# document nested past yamlsafe.MAX_DEPTH is not one it wrote.
MAX_REPORT_BYTES = 256 * 1024 * 1024
MAX_CERT_BYTES = 1024 * 1024


def _read_json(path: Path, limit: int) -> Any:
    """A JSON file the controller wrote, or None (gone, unreadable, torn, or not one
    gpuboot wrote: see read_capped_json)."""
    try:
        return read_capped_json(path, limit, "file", hint="")
    except ConfigError:
        return None


@dataclass(frozen=True)
class KeptNode:
    """What a node's history and status tell of a kept certify run: its verdict and the
    rules it failed or could not judge (sorted, once each)."""

    host: str
    verdict: str
    bad: tuple[str, ...]


@dataclass(frozen=True)
class KeptReport:
    """A kept report.json as `gpuboot status` reads it: its bundle and its nodes of those
    asked for, in the report's order (results.RunReport reads it whole, every finding a
    Finding: ~30 of them a node, for a verdict and a few rule ids)."""

    bundle: Path | None
    nodes: tuple[KeptNode, ...]


# A node's name in a report.json, as its writer puts it (or any other JSON writer): the
# value of a "host" key, a string written out or anything else (a number, null).
_HOST_VALUE = re.compile(rb'"host"\s*:\s*("[^"]*"|.)')


def read_kept_report(path: Path, hosts: Collection[str] | None = None) -> KeptReport | None:
    """The report.json ``path``, its nodes among ``hosts`` (every node with None); None if
    it is none (gone, torn, not a report: as RunReport.from_dict). A report that cannot
    name any of ``hosts`` is not parsed (a kept run of other nodes costs a text search)."""
    try:
        data = read_capped_bytes(path, MAX_REPORT_BYTES, "file", hint="")
        if hosts is not None and not _may_name(data, hosts):
            return KeptReport(None, ())
        doc = loads_json_bounded(decode_utf8(data, str(path), hint=""))
    except (ConfigError, ValueError):
        return None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list):
        return None
    kept = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        host = str(node.get("host"))
        if hosts is not None and host not in hosts:
            continue
        findings = node.get("findings")
        bad = {
            str(f.get("rule"))
            for f in (findings if isinstance(findings, list) else ())
            if isinstance(f, dict) and str(f.get("status")) in BAD
        }
        kept.append(KeptNode(host, str(node.get("verdict")), tuple(sorted(bad))))
    bundle = Path(str(doc["bundle"])) if doc.get("bundle") else None
    return KeptReport(bundle, tuple(kept))


def _may_name(data: bytes, hosts: Collection[str]) -> bool:
    """Whether the JSON text ``data`` may hold a node named one of ``hosts``; False only
    when it surely cannot. A text with no backslash writes every string as itself, so a
    node's name is the quoted text after its "host" key (a name that is no string, or a
    node without one, str()-ed as RunReport does, is left to the parse)."""
    if b"\\" in data or "None" in hosts:
        return True
    names = set(_HOST_VALUE.findall(data))
    if any(not name.startswith(b'"') for name in names):
        return True
    return any(f'"{host}"'.encode() in names for host in hosts)


def _certify_runs(runs: Path, skip: set[str]) -> list[Path]:
    """Certify run directories, newest first (run ids start with their time)."""
    try:
        names = os.listdir(runs)
    except OSError:
        return []
    return [runs / n for n in sorted(names, reverse=True) if "-certify-" in n and n not in skip]


def _certificate(run_dir: Path, host: str, now: datetime) -> dict[str, Any] | None:
    from gpuboot.bundle.names import is_safe_name

    if not is_safe_name(host):
        return None
    cert = _read_json(run_dir / CERT_DIR / f"{host}.json", MAX_CERT_BYTES)
    if not isinstance(cert, dict):
        return None
    try:
        expires = parse_iso(str(cert.get("expires_at")))
    except ValueError:
        return None
    return {"expires_at": iso(expires), "days_left": (expires - now).days}


def _stack(bundle: Path | None, host: str) -> str | None:
    from gpuboot.k8s.decision import stack_of

    return stack_of(bundle, host, None)


def _certify_view(
    runs: Path, skip: set[str], wanted: set[str] | None, now: datetime
) -> dict[str, dict[str, Any]]:
    """host -> its last certify: verdict, time, certificate, stack."""
    out: dict[str, dict[str, Any]] = {}
    for run_dir in _certify_runs(runs, skip):
        if wanted is not None and wanted <= set(out):
            break  # every node asked for has its newest run
        report = read_kept_report(run_dir / REPORT, None if wanted is None else wanted - set(out))
        if report is None:  # not a report (torn, hand-edited): the run is passed over
            continue
        try:
            when = iso(datetime.fromtimestamp((run_dir / REPORT).stat().st_mtime, UTC))
        except OSError:
            continue
        for node in report.nodes:
            host = node.host
            if host in out:
                continue
            out[host] = {
                "verdict": node.verdict,
                "time": when,
                "run_id": run_dir.name,
                "certificate": _certificate(run_dir, host, now),
                "stack": _stack(report.bundle, host),
            }
    return out


def fleet_status(
    hosts: list[str] | None = None,
    *,
    history: Path | None = None,
    now: datetime | None = None,
    warn=lambda _m: None,
) -> dict[str, Any]:
    """The status document: ``nodes`` in natural host order. ``hosts``: the nodes to show
    (an inventory's; a node with no run yet is listed with nothing known), else every node
    the runs and the scan history know."""
    from gpuboot import scan

    now = now or utc_now()
    history = history or scan.default_history()
    scans = scan.read_history(history, warn=warn)
    scan_runs = {str(h.last.get("run_id")) for h in scans.values() if h.last}
    wanted = set(hosts) if hosts is not None else None
    certified = _certify_view(paths.runs_dir(), scan_runs, wanted, now)
    names = hosts if hosts is not None else sorted(set(certified) | set(scans))
    nodes = []
    for host in sorted(names, key=host_key):
        last = scans[host].last if host in scans else None
        nodes.append(
            {
                "host": host,
                "certify": certified.get(host),
                "last_scan": None
                if last is None
                else {
                    "time": last["time"],
                    "verdict": last.get("verdict"),
                    "failing": sorted(r for r, v in last["failing"].items() if v != Status.ERROR),
                    "new": [r for r in last.get("new") or [] if isinstance(r, str)],
                    "not_judged": sorted(
                        r for r, v in last["failing"].items() if v == Status.ERROR
                    ),
                    "escalations": list(last.get("escalated") or []),
                },
            }
        )
    return {"generated": iso(now), "history": str(history), "nodes": nodes}


def rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """The terminal table's rows (headers: HEADERS)."""
    out = []
    for n in doc["nodes"]:
        c, s = n["certify"] or {}, n["last_scan"] or {}
        cert = c.get("certificate")
        expiry = "none" if not cert else f"{cert['days_left']}d ({cert['expires_at'][:10]})"
        if cert and cert["days_left"] < 0:
            expiry = f"expired {cert['expires_at'][:10]}"
        failing = s.get("failing") or []
        drift = f"{len(failing)}: {' '.join(failing)}" if failing else "0"
        if s.get("new"):
            drift += f" (new: {' '.join(s['new'])})"
        if s.get("not_judged"):
            drift += f"; {len(s['not_judged'])} not judged"
        out.append(
            (
                n["host"],
                f"{c['verdict']} {c['time']}" if c else "never certified",
                expiry if c else "",
                c.get("stack") or "",
                s.get("time") or "never scanned",
                drift if s else "",
                "RMA: " + " ".join(s["escalations"]) if s.get("escalations") else "",
            )
        )
    return out


HEADERS = ("node", "last certify", "certificate", "stack", "last scan", "failing", "escalation")
