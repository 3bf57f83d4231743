"""`gpuboot scan`: the scheduled compliance scan of nodes already in service.

The same rules as certify, by default without bandwidth probes (they would compete with
the jobs a node runs), then per node what changed since its previous scan: rules newly
failing (drift), failing still, cleared. Every scan appends one line per node to a
history file (JSON lines). With a kubeconfig, a node that fails is taken out of
service through the certify gate (cordoned, tainted uncertified, labelled); a scan never
puts a node back: only `gpuboot certify` (bandwidth probes, a certificate) does that.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from gpuboot import locks, paths
from gpuboot.checks.rules import ERROR, FAIL
from gpuboot.inventory import Inventory

HISTORY_NAME = "scan-history.jsonl"
HISTORY_HINT = "pass --history FILE in a writable directory (default $GPUBOOT_HOME)"
BAD = (FAIL, ERROR)


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


def _latest(data: bytes, name: Path, warn: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    last: dict[str, dict[str, Any]] = {}
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
        last[rec["host"]] = rec
    return last


def last_records(
    history: Path, *, warn: Callable[[str], None] = lambda _m: None
) -> dict[str, dict[str, Any]]:
    """host -> its most recent scan record. A line that is not a whole, well-formed record
    (a torn line from a killed scan, a hand edit, another encoding) is skipped with a
    warning naming the file and line: one bad line never breaks the scans after it."""
    if not history.is_file():
        return {}
    try:
        data = history.read_bytes()
    except OSError as exc:
        raise paths.fs_error(exc, f"scan history {history}", hint=HISTORY_HINT) from exc
    return _latest(data, history, warn)


def drift(now: dict[str, str], before: dict[str, Any] | None) -> dict[str, Any]:
    """What changed for one node: ``new`` (failing now, not at the previous scan, or
    every failure on a first scan), ``still`` and ``cleared`` rule ids."""
    was = dict(before["failing"]) if before else {}
    return {
        "previous_scan": before["time"] if before else None,
        "new": sorted(r for r in now if r not in was),
        "still": sorted(r for r in now if r in was),
        "cleared": sorted(r for r in was if r not in now),
    }


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


def scan(
    inventory: str | Path | Inventory,
    *,
    limit: str | None = None,
    probes: str = "none",
    history: Path | None = None,
    progress=lambda _m: None,
) -> dict[str, Any]:
    """Run the checks, compare each node with its previous scan, record this one.

    The history is opened before any host is touched (an unusable --history is refused
    first); reading each node's previous record and appending this scan's happen under
    one lock, so concurrent scans each see the one before them. Warnings about skipped
    history lines go to ``progress``.
    """
    from gpuboot import certify

    history = history or default_history()
    # an Inventory a caller already loaded is used as it is, never read again
    inv_path = inventory.path if isinstance(inventory, Inventory) else Path(inventory).resolve()
    with _open_history(history) as fh:
        report = certify.certify(inventory, limit=limit, probes=probes, progress=progress)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with locks.exclusive(fh):
            fh.seek(0)
            before = _latest(fh.read(), history, progress)
            records = []
            for node in report["nodes"]:
                now = failing(node)
                node["drift"] = drift(now, before.get(node["host"]))
                records.append(
                    {
                        "time": stamp,
                        "run_id": report["run_id"],
                        "inventory": str(inv_path),
                        "host": node["host"],
                        "verdict": node["verdict"],
                        "failing": now,
                    }
                )
            try:
                _append(fh, records)
            except OSError as exc:
                raise paths.fs_error(exc, f"scan history {history}", hint=HISTORY_HINT) from exc
    report["history"] = str(history)
    report["passed"] = all(n["verdict"] not in BAD for n in report["nodes"])
    return report
