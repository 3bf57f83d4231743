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
import time
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.checks.rules import ERROR, FAIL

HISTORY_NAME = "scan-history.jsonl"
BAD = (FAIL, ERROR)


def default_history() -> Path:
    return paths.home() / HISTORY_NAME


def failing(node: dict[str, Any]) -> dict[str, str]:
    """rule -> FAIL/ERROR for a node report's findings."""
    return {f["rule"]: f["status"] for f in node["findings"] if f["status"] in BAD}


def last_records(history: Path) -> dict[str, dict[str, Any]]:
    """host -> its most recent scan record (a torn last line from a killed scan is skipped)."""
    last: dict[str, dict[str, Any]] = {}
    if not history.is_file():
        return last
    for line in history.read_text().splitlines():
        try:
            rec = json.loads(line)
            last[str(rec["host"])] = rec
        except (ValueError, KeyError, TypeError):
            continue
    return last


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


def append_history(history: Path, records: list[dict[str, Any]]) -> None:
    history.parent.mkdir(parents=True, exist_ok=True)
    with open(history, "a+") as fh:
        # A scan killed mid-write leaves a torn line: end it so this one stands alone.
        if size := fh.tell():
            fh.seek(size - 1)
            if fh.read(1) != "\n":
                fh.write("\n")  # "a" mode: written at the end whatever the read position
        for rec in records:
            fh.write(json.dumps(rec, sort_keys=True) + "\n")


def scan(
    inventory: str,
    *,
    limit: str | None = None,
    probes: str = "none",
    history: Path | None = None,
    progress=lambda _m: None,
) -> dict[str, Any]:
    """Run the checks, compare each node with its previous scan, record this one."""
    from gpuboot import certify

    history = history or default_history()
    before = last_records(history)
    report = certify.certify(inventory, limit=limit, probes=probes, progress=progress)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    records = []
    for node in report["nodes"]:
        now = failing(node)
        node["drift"] = drift(now, before.get(node["host"]))
        records.append(
            {
                "time": stamp,
                "run_id": report["run_id"],
                "inventory": str(Path(inventory).resolve()),
                "host": node["host"],
                "verdict": node["verdict"],
                "failing": now,
            }
        )
    append_history(history, records)
    report["history"] = str(history)
    report["passed"] = all(n["verdict"] not in BAD for n in report["nodes"])
    return report
