"""`gpuboot scan`: the scheduled compliance scan of nodes already in service.

The same rules as certify, by default without bandwidth probes (they would compete with
the jobs a node runs), then per node what changed since its previous scan: rules newly
failing (drift), failing still, cleared. Every scan appends one line per node to a
history file (JSON lines). With a kubeconfig, a node that fails is taken out of
service through the certify gate (cordoned, tainted uncertified, labelled); a scan never
puts a node back: only `gpuboot certify` (bandwidth probes, a certificate) does that.

A rule the harness could not judge (ERROR: an unreachable node, a probe that timed out) is
neither drift nor a fix: it is listed as not judged, and the node's last known state of that
rule carries over to the next scan. Each record also keeps the node's boot id and hardware
faults, from which gpuboot.escalation turns a fault back after N reboots into an RMA.

Exit codes (a scheduler tells new trouble from old): 0 nothing failing; 1 new drift (a rule
newly failing, a first scan's failures, a new RMA escalation); 4 nothing new, but a node or
rule could not be judged (unreachable, harness ERROR); 5 still failing as at the last scan,
nothing new. 2 and 3 keep their meaning (bad input, the run broke).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from gpuboot import escalation, locks, paths
from gpuboot.checks.rules import ERROR, FAIL
from gpuboot.inventory import Inventory

HISTORY_NAME = "scan-history.jsonl"
HISTORY_HINT = "pass --history FILE in a writable directory (default $GPUBOOT_HOME)"
BAD = (FAIL, ERROR)

EXIT_CLEAN = 0
EXIT_NEW_DRIFT = 1
EXIT_UNJUDGED = 4
EXIT_STILL_FAILING = 5


def default_history() -> Path:
    return paths.home() / HISTORY_NAME


def failing(node: dict[str, Any]) -> dict[str, str]:
    """rule -> FAIL/ERROR for a node report's findings."""
    return {f["rule"]: f["status"] for f in node["findings"] if f["status"] in BAD}


def _problem(rec: Any) -> str | None:
    """What makes a history record unusable as a node's previous scan, if anything."""
    if not isinstance(rec, dict):
        return f"is not a JSON object but {type(rec).__name__}"
    for key, kind in (("host", str), ("time", str), ("failing", dict)):
        if key not in rec:
            return f"has no {key!r}"
        if not isinstance(rec[key], kind):
            return f"has {key!r} that is not a {kind.__name__}"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in rec["failing"].items()):
        return "has 'failing' that is not rule -> status"
    return None


class NodeHistory:
    """One node's history folded record by record: its latest record, the rules last known
    failing (a rule the harness could not judge keeps what was known of it before) and its
    hardware faults per boot (gpuboot.escalation)."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.known: dict[str, str] = {}
        self.faults = escalation.FaultHistory()

    def add(self, rec: dict[str, Any]) -> None:
        known = {r: s for r, s in rec["failing"].items() if s != ERROR}
        for rule, status in rec["failing"].items():
            if status == ERROR and rule in self.known:
                known[rule] = self.known[rule]
        self.known, self.last = known, rec
        faults = rec.get("faults")
        self.faults.add(
            rec["time"],
            rec.get("boot_id"),
            faults if isinstance(faults, list) else (),
            rec.get("escalated") if isinstance(rec.get("escalated"), list) else (),
            rec.get("gpus") if isinstance(rec.get("gpus"), dict) else None,
        )

    def baseline(self) -> dict[str, Any] | None:
        """The previous scan as drift() reads it: its time, the rules known failing."""
        return {"time": self.last["time"], "failing": self.known} if self.last else None


def _records(data: bytes, name: Path, warn: Callable[[str], None]) -> Iterator[dict[str, Any]]:
    """Every well-formed record of a history file's bytes, in file order."""
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            warn(f"{name}:{number}: warning: not UTF-8 (byte {exc.start}); line skipped")
            continue
        except ValueError as exc:  # includes a torn last line from a killed scan
            warn(f"{name}:{number}: warning: not a JSON record ({exc}); line skipped")
            continue
        if problem := _problem(rec):
            warn(f"{name}:{number}: warning: the record {problem}; line skipped")
            continue
        yield rec


def _fold(data: bytes, name: Path, warn: Callable[[str], None]) -> dict[str, NodeHistory]:
    out: dict[str, NodeHistory] = {}
    for rec in _records(data, name, warn):
        out.setdefault(rec["host"], NodeHistory()).add(rec)
    return out


def _latest(data: bytes, name: Path, warn: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    return {h: n.last for h, n in _fold(data, name, warn).items() if n.last}


def _read(history: Path) -> bytes | None:
    if not history.is_file():
        return None
    try:
        return history.read_bytes()
    except OSError as exc:
        raise paths.fs_error(exc, f"scan history {history}", hint=HISTORY_HINT) from exc


def last_records(
    history: Path, *, warn: Callable[[str], None] = lambda _m: None
) -> dict[str, dict[str, Any]]:
    """host -> its most recent scan record. A line that is not a whole, well-formed record
    (a torn line from a killed scan, a hand edit, another encoding) is skipped with a
    warning naming the file and line: one bad line never breaks the scans after it."""
    data = _read(history)
    return _latest(data, history, warn) if data is not None else {}


def read_history(
    history: Path, *, warn: Callable[[str], None] = lambda _m: None
) -> dict[str, NodeHistory]:
    """host -> its folded history (bad lines skipped with a warning, as last_records)."""
    data = _read(history)
    return _fold(data, history, warn) if data is not None else {}


def history_records(
    history: Path, *, warn: Callable[[str], None] = lambda _m: None
) -> list[dict[str, Any]]:
    """Every well-formed record, in file order (the trend page's input)."""
    data = _read(history)
    return list(_records(data, history, warn)) if data is not None else []


def drift(now: dict[str, str], before: dict[str, Any] | None) -> dict[str, Any]:
    """What changed for one node: ``new`` (failing now, not at the previous scan, or
    every failure on a first scan), ``still`` and ``cleared`` rule ids. A rule ERROR now
    (the harness could not judge it) is none of these: see :func:`unjudged`; an ERROR in
    ``before`` is no knowledge of that rule either."""
    was = {r for r, s in before["failing"].items() if s != ERROR} if before else set()
    fail = {r for r, s in now.items() if s != ERROR}
    return {
        "previous_scan": before["time"] if before else None,
        "new": sorted(fail - was),
        "still": sorted(fail & was),
        "cleared": sorted(r for r in was if r not in now),
    }


def unjudged(now: dict[str, str]) -> list[str]:
    """Rules the harness could not judge this scan (ERROR): they say nothing of drift."""
    return sorted(r for r, s in now.items() if s == ERROR)


def exit_code(report: dict[str, Any]) -> int:
    """The scan's exit code (module docstring): new drift first, then not judged, then
    still failing."""
    nodes = report["nodes"]
    if any(n["drift"]["new"] or any(e["new"] for e in n.get("escalations") or []) for n in nodes):
        return EXIT_NEW_DRIFT
    if any(n.get("unjudged") for n in nodes):
        return EXIT_UNJUDGED
    if any(n["drift"]["still"] for n in nodes):
        return EXIT_STILL_FAILING
    return EXIT_CLEAN


def _append(fh: IO[bytes], records: list[dict[str, Any]]) -> None:
    # A scan killed mid-write leaves a torn line: end it so this one stands alone.
    fh.seek(0, 2)
    if size := fh.tell():
        fh.seek(size - 1)
        if fh.read(1) != b"\n":
            fh.write(b"\n")  # "a" mode: written at the end whatever the read position
    fh.write(b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in records))
    fh.flush()


def _open_history(history: Path) -> IO[bytes]:
    """The history, opened for reading and appending (created, private, if missing)."""
    try:
        history.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(history, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        return os.fdopen(fd, "a+b")
    except OSError as exc:
        raise paths.fs_error(exc, f"scan history {history}", hint=HISTORY_HINT) from exc


def append_history(history: Path, records: list[dict[str, Any]]) -> None:
    with _open_history(history) as fh, locks.exclusive(fh):
        _append(fh, records)


def drift_lines(report: dict[str, Any]) -> list[str]:
    """One line per node for the terminal: what changed, what could not be judged, and
    any RMA escalation."""
    lines = []
    for node in report["nodes"]:
        d, err = node["drift"], node.get("unjudged") or []
        since = f"since {d['previous_scan']}" if d["previous_scan"] else "first scan"
        changes = [f"{k}: {', '.join(d[k])}" for k in ("new", "still", "cleared") if d[k]]
        if err and len(err) == len(node.get("findings") or err):
            reason = next((f.get("reason") for f in node.get("findings") or []), "")
            changes = [f"not judged (ERROR: {reason}); no drift counted"]
        elif err:
            changes.append(f"not judged: {', '.join(err)}")
        lines.append(f"{node['host']} ({since}): " + ("; ".join(changes) or "no drift"))
        lines += [f"  {escalation.action_text(e)}" for e in node.get("escalations") or []]
    return lines


def _figures(node: dict[str, Any]) -> dict[str, list[Any]]:
    """figure -> [median, unit, fail_below] of what the scan measured (the trend page,
    gpuboot/report/trend.py, reads them)."""
    out: dict[str, list[Any]] = {}
    for m in node.get("measurements") or []:
        value = m.get("value")
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.setdefault(str(m.get("name")), [value, m.get("unit"), m.get("fail_below")])
    return out


def scan(
    inventory: str | Path | Inventory,
    *,
    limit: str | None = None,
    probes: str = "none",
    history: Path | None = None,
    progress=lambda _m: None,
    rma_after_reboots: int = escalation.DEFAULT_REBOOTS,
) -> dict[str, Any]:
    """Run the checks, compare each node with its previous scans, record this one.

    The history is opened before any host is touched (an unusable --history is refused
    first); reading each node's history and appending this scan's records happen under
    one lock, so concurrent scans each see the one before them. Warnings about skipped
    history lines go to ``progress``. ``rma_after_reboots``: see gpuboot.escalation.
    """
    from gpuboot import certify

    escalation.check_reboots(rma_after_reboots)
    history = history or default_history()
    # an Inventory a caller already loaded is used as it is, never read again
    inv_path = inventory.path if isinstance(inventory, Inventory) else Path(inventory).resolve()
    with _open_history(history) as fh:
        report = certify.certify(inventory, limit=limit, probes=probes, progress=progress)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        bundle = Path(report["bundle"]) if report.get("bundle") else None
        with locks.exclusive(fh):
            fh.seek(0)
            before = _fold(fh.read(), history, progress)
            records = []
            for node in report["nodes"]:
                now = failing(node)
                past = before.get(node["host"])
                node["drift"] = drift(now, past.baseline() if past else None)
                node["unjudged"] = unjudged(now)
                seen = escalation.observe_bundle(bundle / node["host"]) if bundle else None
                seen = seen or escalation.Observation()
                found = escalation.escalations(
                    seen, past.faults if past else None, rma_after_reboots
                )
                escalation.apply(node, found)
                records.append(
                    {
                        "time": stamp,
                        "run_id": report["run_id"],
                        "inventory": str(inv_path),
                        "host": node["host"],
                        "verdict": node["verdict"],
                        "failing": now,
                        "new": node["drift"]["new"],
                        "boot_id": seen.boot_id,
                        "faults": sorted(seen.faults),
                        "escalated": [e["fault"] for e in found],
                        "gpus": seen.parts,
                        "figures": _figures(node),
                    }
                )
            try:
                _append(fh, records)
            except OSError as exc:
                raise paths.fs_error(exc, f"scan history {history}", hint=HISTORY_HINT) from exc
    report["history"] = str(history)
    report["passed"] = all(n["verdict"] not in BAD for n in report["nodes"])
    report["exit_code"] = exit_code(report)
    return report
