"""`gpuboot status NODE --history`: one node's story, oldest first, from what the controller
keeps (no SSH): its install runs (what changed), its certify runs (verdict, certificate,
scope), its scans in the scan history (verdict, drift new/still/cleared, a changed boot id
as a reboot, hardware faults, RMA escalations, an operator's release) and its remediation
steps. A compacted history keeps one record a node plus the scans where its failing rules
changed: those are what the timeline shows of the scans before compaction.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuboot import paths, scan
from gpuboot.errors import BadInput
from gpuboot.remediate.ladder import RELEASE
from gpuboot.report._util import iso, parse_iso
from gpuboot.status import CERT_DIR, MAX_CERT_BYTES, REPORT, _read_json, read_kept_report

# Kinds in the order entries of one instant are told (a scan sees the reboot before it).
KINDS = (
    "install",
    "certify",
    "rebooted",
    "fault",
    "scan",
    "escalation",
    "released",
    "remediation",
)
ROLLOUT, RESULTS = "rollout.json", "results.json"
SAME_S = 60  # one release recorded in both histories lies within this of itself
MAX_RESULTS_BYTES = 64 * 1024 * 1024  # ansible-runner's per-host summary: far below


def _entry(time: str, kind: str, run_id: str | None, summary: str) -> dict[str, Any]:
    return {"time": time, "kind": kind, "run_id": run_id, "summary": summary}


def _mtime(path: Path) -> str | None:
    try:
        return iso(datetime.fromtimestamp(path.stat().st_mtime, UTC))
    except OSError:
        return None


def _runs(runs: Path, verb: str) -> list[Path]:
    from gpuboot.runs import RUN_NAME

    try:
        names = os.listdir(runs)
    except OSError:
        return []
    return [
        runs / n
        for n in sorted(names)
        if (m := RUN_NAME.fullmatch(n)) and m["verb"] == verb and not (runs / n).is_symlink()
    ]


def _install_results(run_dir: Path) -> dict[str, dict[str, Any]]:
    """host -> its summary in an install run (one results.json per batch)."""
    out: dict[str, dict[str, Any]] = {}
    for path in [run_dir / RESULTS, *sorted(run_dir.glob(f"batch-*/{RESULTS}"))]:
        doc = _read_json(path, MAX_RESULTS_BYTES)
        hosts = doc.get("hosts") if isinstance(doc, dict) else None
        if isinstance(hosts, dict):
            out.update({h: r for h, r in hosts.items() if isinstance(r, dict)})
    return out


Entries = dict[str, list[dict[str, Any]]]  # host -> its entries


def install_entries(runs: Path, hosts: set[str]) -> Entries:
    out: Entries = {}
    for run_dir in _runs(runs, "install"):
        found = {h: r for h, r in _install_results(run_dir).items() if h in hosts}
        time = _mtime(run_dir / RESULTS) or _mtime(run_dir)
        if not found or not time:
            continue
        rollout = _read_json(run_dir / ROLLOUT, MAX_RESULTS_BYTES)
        check = isinstance(rollout, dict) and rollout.get("check") is True
        for host, res in found.items():
            status, changed = str(res.get("status") or "?"), res.get("changed")
            what = f"{status}, {changed} task(s) {'would change' if check else 'changed'}"
            if res.get("failed_task"):
                what += f"; failed at {res['failed_task']}: {res.get('reason') or ''}".rstrip(": ")
            what = ("check: " if check else "") + what
            out.setdefault(host, []).append(_entry(time, "install", run_dir.name, what))
    return out


def certify_entries(runs: Path, hosts: set[str], skip: set[str]) -> Entries:
    from gpuboot.bundle.names import is_safe_name

    out: Entries = {}
    for run_dir in _runs(runs, "certify"):
        if run_dir.name in skip:  # an old scan's run, named -certify-: the history has it
            continue
        report = read_kept_report(run_dir / REPORT, hosts)
        time = _mtime(run_dir / REPORT)
        if report is None or not report.nodes or time is None:
            continue
        certs = _names(run_dir / CERT_DIR)
        for node in report.nodes:
            what = node.verdict + (f" ({' '.join(node.bad)})" if node.bad else "")
            cert_path = run_dir / CERT_DIR / f"{node.host}.json"
            cert = None
            if cert_path.name in certs and is_safe_name(node.host):
                cert = _read_json(cert_path, MAX_CERT_BYTES)
            if isinstance(cert, dict):
                scope = cert.get("scope")
                what += f"; certificate {cert_path} ({scope}), expires {cert.get('expires_at')}"
            out.setdefault(node.host, []).append(_entry(time, "certify", run_dir.name, what))
    return out


def _names(folder: Path) -> set[str]:
    """The names in ``folder`` (none if it is gone): a run certifies few of its nodes, or
    none, and a certificate's read is tried only where one is."""
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def _history_lines(history: Path, hosts: set[str] | None, warn) -> Entries:
    """host -> its history records (every host's with ``hosts`` None), every line checked as
    scans check it (scan.History), in one read."""
    from gpuboot.yamlsafe import read_capped_bytes

    class Lines(scan.History):
        def __init__(self) -> None:
            super().__init__()
            self.lines: Entries = {}

        def add(self, rec: dict[str, Any], size: int) -> None:
            if hosts is None or rec["host"] in hosts:
                self.lines.setdefault(rec["host"], []).append(rec)
            super().add(rec, size)

    if not os.path.lexists(history):
        return {}
    data = read_capped_bytes(
        history, scan.MAX_HISTORY_BYTES, "scan history", hint=scan.HISTORY_HINT
    )
    return Lines.parse(data, history, warn).lines


def _short(boot: Any) -> str:
    return str(boot)[:8] if boot else "unknown"


def scan_entries(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node's history lines as entries: each scan with its drift, a reboot where the
    boot id changed, each fault the first time it is seen (and again after a release),
    escalations and releases; a compacted record's folded faults at their first sighting."""
    out: list[dict[str, Any]] = []
    fold = scan.NodeHistory()
    # a compacted history also keeps the trend's point of the node's last scan: told once
    scanned = {r["time"] for r in records if not r.get(scan.TREND) and scan.RELEASED not in r}
    boot, seen = None, set()
    for rec in records:
        time, run_id = rec["time"], rec.get("run_id")
        if scan.RELEASED in rec:
            fold.release()
            seen = set()
            out.append(_entry(time, "released", None, _released(rec)))
            continue
        if rec.get(scan.TREND):
            if time in scanned:
                continue
            failing = sorted(rec["failing"])
            what = f"failing: {' '.join(failing)}" if failing else "nothing failing"
            out.append(_entry(time, "scan", None, f"{what} (compacted history)"))
            continue
        if scan.STATE in rec:
            state = rec[scan.STATE]
            for key, first, *_ in state.get("faults") or []:
                seen.add(key)
                out.append(_entry(first, "fault", None, f"{key} (first seen; compacted history)"))
        moved = scan.drift(rec["failing"], fold.baseline())
        new_boot = rec.get("boot_id")
        if boot and new_boot and new_boot != boot:
            out.append(
                _entry(time, "rebooted", run_id, f"boot id {_short(boot)} -> {_short(new_boot)}")
            )
        boot = new_boot or boot
        for key in rec.get("faults") or []:
            if isinstance(key, str) and key not in seen:
                seen.add(key)
                out.append(_entry(time, "fault", run_id, key))
        parts = [str(rec.get("verdict") or "?")]
        parts += [f"{k}: {' '.join(getattr(moved, k))}" for k in ("new", "still", "cleared")]
        unjudged = scan.unjudged(rec["failing"])
        if unjudged:
            parts.append(f"not judged: {' '.join(unjudged)}")
        summary = "; ".join(p for p in parts if not p.endswith(": "))
        if scan.STATE in rec:
            summary += " (last scan; earlier ones compacted)"
        out.append(_entry(time, "scan", run_id, summary))
        for key in rec.get("escalated") or []:
            if isinstance(key, str):
                out.append(_entry(time, "escalation", run_id, f"hardware inspection / RMA: {key}"))
        fold.add(rec)
    return out


def remediation_entries(history: Path, hosts: set[str]) -> Entries:
    from gpuboot.remediate import record

    out: Entries = {}
    for rec in record.read(record.beside(history)):
        at = rec.get("at")
        if rec.get("host") not in hosts or isinstance(at, bool) or not isinstance(at, int | float):
            continue
        time = iso(datetime.fromtimestamp(at, UTC))
        if rec.get("step") == RELEASE:  # `gpuboot node release`: told as the release it is
            what = _released(rec)
            out.setdefault(rec["host"], []).append(_entry(time, "released", None, what))
            continue
        what = f"{rec.get('step')}: {rec.get('result')}"
        if rec.get("fault"):
            what += f" ({rec['fault']})"
        out.setdefault(rec["host"], []).append(_entry(time, "remediation", None, what))
    return out


def _released(rec: dict[str, Any]) -> str:
    return f"released by {rec.get('by') or '?'}: {rec.get('reason') or ''}".rstrip(": ")


def _once(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A release both histories record (the scan history's, the remediation history's, a
    second apart) told once."""
    out: list[dict[str, Any]] = []
    for e in entries:
        last = out[-1] if out else None
        if (
            last is not None
            and e["kind"] == last["kind"] == "released"
            and e["summary"] == last["summary"]
            and abs((parse_iso(e["time"]) - parse_iso(last["time"])).total_seconds()) <= SAME_S
        ):
            continue
        out.append(e)
    return out


def timelines(
    hosts: set[str] | None = None, *, history: Path | None = None, warn=lambda _m: None
) -> Entries:
    """host -> its entries, oldest first, for ``hosts`` (None: every node the scan history
    names), each source read once whatever the number of nodes (the trend page asks for a
    fleet's)."""
    history = history or scan.default_history()
    runs = paths.runs_dir()
    lines = _history_lines(history, hosts, warn)
    hosts = set(lines) if hosts is None else hosts
    scan_runs = {str(r.get("run_id")) for recs in lines.values() for r in recs if r.get("run_id")}
    out: Entries = {}
    for source in (
        install_entries(runs, hosts),
        certify_entries(runs, hosts, scan_runs),
        {h: scan_entries(recs) for h, recs in lines.items()},
        remediation_entries(history, hosts),
    ):
        for host, entries in source.items():
            out.setdefault(host, []).extend(entries)
    for entries in out.values():
        entries.sort(key=lambda e: (e["time"], KINDS.index(e["kind"])))
    return {host: _once(entries) for host, entries in out.items()}


def node_timeline(
    host: str, *, history: Path | None = None, warn=lambda _m: None
) -> dict[str, Any]:
    """The ``status NODE --history`` document: ``entries`` oldest first. A node neither a
    kept run nor the history knows is BadInput (a typo must not read as a quiet node)."""
    history = history or scan.default_history()
    entries = timelines({host}, history=history, warn=warn).get(host)
    if not entries:
        raise BadInput(
            f"no kept run, scan or remediation names node {host!r}",
            where=f"gpuboot status {host}",
            hint="see the nodes gpuboot knows: gpuboot status (or gpuboot status -i INVENTORY)",
        )
    return {
        "host": host,
        "history": str(history),
        "runs": str(paths.runs_dir()),
        "entries": entries,
    }


HEADERS = ("time", "kind", "run", "summary")


def rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    return [(e["time"], e["kind"], e["run_id"] or "", e["summary"]) for e in doc["entries"]]
