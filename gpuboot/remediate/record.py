"""Where remediation steps are remembered: a JSON-lines file beside the scan history of the
fleet (GPUBOOT_HOME/remediation-history.jsonl beside the default one, <history>.remediation.jsonl
beside any other), one record per step or release, and on a cluster
node the bounded actions annotation. The ladder reads both: the file survives a node that
was rebuilt, the annotation a controller that was."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpuboot import locks, paths
from gpuboot.k8s.patch import read_actions
from gpuboot.remediate.ladder import RELEASE, RUNGS, Past
from gpuboot.yamlsafe import loads_json_bounded

HISTORY_NAME = "remediation-history.jsonl"
HISTORY_SUFFIX = ".remediation.jsonl"  # beside a scan history other than the default
# Only the tail is read: the window is 7 days and a node takes a few steps a week, so a
# megabyte holds every fleet's window many times over and a huge file costs no more.
TAIL_BYTES = 1 << 20
HINT = "set GPUBOOT_HOME to a writable directory, or remove the unreadable file"


def default_history() -> Path:
    return paths.home() / HISTORY_NAME


def beside(scan_history: str | Path | None) -> Path:
    """The remediation history of the fleet a scan history records (two fleets, or a
    test's own history, share no steps)."""
    from gpuboot.scan import default_history as default_scan_history

    if scan_history is None or Path(scan_history).resolve() == default_scan_history().resolve():
        return default_history()
    scan_history = Path(scan_history).resolve()
    return scan_history.with_name(scan_history.name + HISTORY_SUFFIX)


def append(history: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append records (under the file's lock: concurrent runs never interleave a line)."""
    lines = [json.dumps(r, sort_keys=True) + "\n" for r in records]
    if not lines:
        return
    try:
        paths.private_dir(history.parent)
        fd = os.open(history, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh, locks.exclusive(fh):
            fh.write("".join(lines))
    except OSError as exc:
        raise paths.fs_error(exc, f"remediation history {history}", hint=HINT) from exc


def read(history: Path) -> list[dict[str, Any]]:
    """The records in the file's tail; a line that is not a record is skipped (a torn
    write, an edit), never trusted half."""
    try:  # O_NONBLOCK: a FIFO does not wait for a writer; only a regular file is read
        fd = os.open(history, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise paths.fs_error(
                    OSError(f"{history} is not a regular file"),
                    f"remediation history {history}",
                    hint=HINT,
                )
            fh.seek(max(0, st.st_size - TAIL_BYTES))
            data = fh.read()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise paths.fs_error(exc, f"remediation history {history}", hint=HINT) from exc
    out = []
    for line in data.splitlines():
        try:
            rec = loads_json_bounded(line)
        except ValueError:  # torn, edited, or nested past the bound
            continue
        if isinstance(rec, dict) and isinstance(rec.get("host"), str):
            out.append(rec)
    return out


def _past(rec: Any) -> Past | None:
    if not isinstance(rec, dict):
        return None
    at, step, result = rec.get("at"), rec.get("step"), rec.get("result")
    if isinstance(at, bool) or not isinstance(at, int | float) or step not in (*RUNGS, RELEASE):
        return None
    fault = rec.get("fault")
    return Past(float(at), step, str(result), fault if isinstance(fault, str) else "")


def past_of(host: str, records: list[dict[str, Any]]) -> list[Past]:
    return [p for r in records if r.get("host") == host and (p := _past(r)) is not None]


def past_of_node(node: dict[str, Any]) -> list[Past]:
    """The steps in the node's bounded actions annotation (they name no fault)."""
    notes = (node.get("metadata") or {}).get("annotations") or {}
    return [p for a in read_actions(notes) if (p := _past(a)) is not None]


def merged(*sources: Iterable[Past]) -> list[Past]:
    """One list from the file and the annotation; a step both recorded counts once."""
    seen: dict[tuple[int, str], Past] = {}
    for p in (p for src in sources for p in src):
        seen.setdefault((int(p.at), p.step), p)
    return sorted(seen.values(), key=lambda p: p.at)


def entry(step: str, result: str, fault: str = "", at: float | None = None) -> dict[str, Any]:
    return {
        "at": int(time.time() if at is None else at),
        "step": step,
        "result": result,
        "fault": fault,
    }
