"""`gpuboot runs`: the kept run directories, and their retention.

Every run of install, certify and scan keeps ``<runs root>/<id>/`` (``GPUBOOT_RUNS``,
default ``$GPUBOOT_HOME/runs``), ``<id>`` = ``YYYYmmddTHHMMSS-<verb>-<hex6>``
(runner.new_run_dir). ``prune`` removes old ones and never:
- the newest run of each verb (``install --resume`` and the operator read the last one);
- the run holding a node's newest valid certificate, with the bundle it vouches for: an
  hourly scan must not push a node's certificate out of retention;
- a run that an open escalation points at (the newest scan record of a node, in the default
  scan history, recommends RMA): its bundle is the evidence the vendor will ask for;
- a run in progress: one named by a host lock whose process is alive; while a run that
  holds locks has not named its run yet, every run begun since it started; and any run
  written to in the last ACTIVE_S seconds (install --check takes no lock);
- anything that is not a run directory directly under the root: a name of another
  shape, a symlink (never followed: what it points to may be anyone's) or a file.
Removal goes through shutil.rmtree, which deletes symlinks inside a run as links.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import BadInput, ConfigError
from gpuboot.report._util import parse_iso
from gpuboot.yamlsafe import read_capped_bytes

RUN_NAME = re.compile(r"(?P<stamp>\d{8}T\d{6})-(?P<verb>[a-z][a-z0-9_]*)-(?P<suffix>[0-9a-f]{6})")
_AGE = re.compile(r"(?P<n>\d+)(?P<unit>[smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# A run written to this recently may still be running even without a lock (install
# --check holds none): kept.
ACTIVE_S = 600
CERT_DIR = Path("reports") / "certificates"  # gpuboot.report.write_reports' layout
CERT_MAX = 1 << 20  # a certificate is a few KB: a larger file is not one


@dataclass(frozen=True)
class Run:
    id: str
    verb: str
    path: Path
    started: float  # epoch seconds (the id's local time)
    size: int  # bytes, links counted as themselves
    in_progress: bool
    newest: bool  # the newest run of its verb

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "verb": self.verb,
            "path": str(self.path),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "bytes": self.size,
            "in_progress": self.in_progress,
            "newest": self.newest,
        }


def parse_age(text: str) -> float:
    """``14d``, ``12h``, ``30m``, ``2w``, ``90s`` -> seconds (BadInput otherwise)."""
    m = _AGE.fullmatch(text.strip())
    if not m or int(m["n"]) <= 0:
        raise BadInput(
            f"--older-than {text!r} is not an age",
            where="gpuboot runs prune --older-than",
            hint="a positive number and a unit: s, m, h, d or w (e.g. 14d, 12h)",
        )
    return int(m["n"]) * _UNIT_S[m["unit"]]


def _usage(path: Path) -> tuple[int, float]:
    """(bytes, newest modification time) of a run directory, links as themselves."""
    total, newest = 0, path.lstat().st_mtime
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in dirs + files:
            with contextlib.suppress(OSError):  # removed meanwhile
                st = os.lstat(os.path.join(root, name))
                total += st.st_size
                newest = max(newest, st.st_mtime)
    return total, newest


def _started(stamp: str, path: Path) -> float:
    try:
        return time.mktime(time.strptime(stamp, "%Y%m%dT%H%M%S"))
    except ValueError:  # a well-shaped but impossible date: the directory's own time
        return path.lstat().st_mtime


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _busy() -> tuple[set[str], float | None]:
    """(run ids named by live lock holders, start of the earliest live holder that has
    not named its run yet). Read only: taking a lock here could refuse a real run."""
    lock_dir = paths.home() / "locks"
    named: set[str] = set()
    unnamed: float | None = None
    try:
        entries = list(os.scandir(lock_dir))
    except OSError:
        return named, None
    for entry in entries:
        if not entry.name.endswith(".lock") or not entry.is_file(follow_symlinks=False):
            continue
        try:
            with open(entry.path, "rb") as fh:
                info = json.loads(fh.read(4096) or b"{}")
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict) or not _alive(info.get("pid")):
            continue  # released (empty) or left by a process that is gone
        if info.get("run_id"):
            named.add(str(info["run_id"]))
        else:
            try:
                stamp = time.strptime(str(info.get("started")), "%Y-%m-%dT%H:%M:%SZ")
                since = float(calendar.timegm(stamp))  # written in UTC
            except ValueError:
                since = 0.0  # unknown start: every run could be its
            unnamed = since if unnamed is None else min(unnamed, since)
    return named, unnamed


def list_runs(root: Path | None = None) -> list[Run]:
    """The run directories under the runs root, oldest first."""
    root = root or paths.runs_dir()
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise paths.fs_error(exc, f"runs directory {root}") from exc
    named, unnamed = _busy()
    found = []
    for entry in entries:
        m = RUN_NAME.fullmatch(entry.name)
        # a symlink is never a run here, whatever it points to
        if (
            not m
            or entry.is_symlink()
            or not stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode)
        ):
            continue
        path = Path(entry.path)
        found.append((m, path, _started(m["stamp"], path)))
    found.sort(key=lambda item: (item[2], item[0].string))
    newest = {m["verb"]: m.string for m, _p, _s in found}
    runs = []
    now = time.time()
    for m, path, started in found:
        size, written = _usage(path)
        busy = (
            m.string in named
            or (unnamed is not None and started >= unnamed - 1)
            or now - written < ACTIVE_S
        )
        runs.append(
            Run(
                id=m.string,
                verb=m["verb"],
                path=path,
                started=started,
                size=size,
                in_progress=busy,
                newest=newest[m["verb"]] == m.string,
            )
        )
    return runs


def _valid_certificates(run: Run, now: float) -> list[str]:
    """Hosts holding an unexpired certificate in ``run`` (the file's name and its
    ``host`` agree; an unreadable or oversized file vouches for nothing)."""
    from gpuboot.bundle.names import is_safe_name

    hosts = []
    try:
        entries = list(os.scandir(run.path / CERT_DIR))
    except OSError:
        return hosts
    for entry in entries:
        host = entry.name.removesuffix(".json")
        if host == entry.name or not is_safe_name(host) or entry.is_symlink():
            continue
        try:  # a FIFO or device vouches for nothing and must not hold the prune
            data = read_capped_bytes(entry.path, CERT_MAX, "certificate", hint="")
            cert = json.loads(data)
            expires = parse_iso(str(cert["expires_at"])).timestamp()
        except (ConfigError, OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if cert.get("host") == host and expires > now:
            hosts.append(host)
    return hosts


def _escalated_runs() -> set[str]:
    """Run ids the newest scan record of each node names while it recommends RMA."""
    from gpuboot import scan

    history = scan.default_history()
    if not history.is_file():
        return set()
    return {
        str(rec["run_id"])
        for rec in scan.last_records(history).values()
        if rec.get("escalated") and rec.get("run_id")
    }


def protected(runs: list[Run], now: float) -> dict[str, str]:
    """run id -> why retention keeps it whatever --keep or --older-than say."""
    why: dict[str, str] = {}
    newest_cert: dict[str, Run] = {}
    for run in runs:  # oldest first: a later certificate replaces an earlier one
        for host in _valid_certificates(run, now):
            newest_cert[host] = run
    for host, run in sorted(newest_cert.items()):
        why[run.id] = why.get(run.id, "holds the newest valid certificate of") + f" {host}"
    for run_id in _escalated_runs():
        why.setdefault(run_id, "evidence of an open RMA escalation")
    return why


def prune(
    *, keep: int | None = None, older_than: float | None = None, dry_run: bool = False
) -> dict[str, Any]:
    """Remove the runs beyond the ``keep`` newest of each verb, or older than
    ``older_than`` seconds; never the newest of a verb, never one in progress, never a
    protected one (a node's newest valid certificate, an open escalation's evidence)."""
    if (keep is None) == (older_than is None):
        raise BadInput(
            "say which runs to remove: --keep N or --older-than AGE",
            where="gpuboot runs prune",
            hint="e.g. gpuboot runs prune --keep 20, or --older-than 14d",
        )
    if keep is not None and keep < 1:
        raise BadInput(
            f"--keep {keep}: the newest run of each verb is always kept",
            where="gpuboot runs prune --keep",
            hint="use --keep 1 or more",
        )
    root = paths.runs_dir()
    runs = list_runs(root)
    now = time.time()
    keeps = protected(runs, now)
    by_verb: dict[str, list[Run]] = {}
    for run in runs:
        by_verb.setdefault(run.verb, []).append(run)
    removed, kept = [], []
    for verb_runs in by_verb.values():
        for rank, run in enumerate(reversed(verb_runs)):  # newest first
            old = rank >= keep if keep is not None else now - run.started > older_than
            if not old or run.newest:
                kept.append((run, "newest of its verb" if run.newest else "within the limit"))
            elif run.in_progress:
                kept.append((run, "in progress"))
            elif run.id in keeps:
                kept.append((run, keeps[run.id]))
            else:
                removed.append(run)
    freed = 0
    for run in sorted(removed, key=lambda r: r.started):
        if not dry_run:
            _remove(root, run.path)
        freed += run.size
    return {
        "root": str(root),
        "dry_run": dry_run,
        "removed": [r.to_dict() for r in sorted(removed, key=lambda r: r.started)],
        "kept": [
            {**r.to_dict(), "why": why} for r, why in sorted(kept, key=lambda k: k[0].started)
        ],
        "freed_bytes": freed,
    }


def _remove(root: Path, path: Path) -> None:
    # checked again right before: still a real directory directly under the root
    if path.parent != root or path.is_symlink() or not path.is_dir():
        return
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise paths.fs_error(exc, f"run directory {path}") from exc


def human_size(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            break
    return f"{n:.1f} {unit}"
