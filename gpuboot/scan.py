"""`gpuboot scan`: the scheduled compliance scan of nodes already in service.

The same rules as certify, by default without bandwidth probes (they would compete with
the jobs a node runs), then per node what changed since its previous scan: rules newly
failing (drift), failing still, cleared. Every scan appends one line per node to a
history file (JSON lines), read once per scan (drift, the folded node state, escalation and
the trend page written next all come from that one read: History). Once the appended
records outweigh the compacted ones (and 256 KiB), the scan compacts the file: per node one
record (its last scan and the folded state: rules known failing, faults per boot), the
trend page's points in about a line a scan over the last year of hourly scans; written to
a new file (same mode), fsynced and renamed over the old one, so a crash or a full disk
leaves the old history whole. With a kubeconfig, a node that fails is taken out of
service through the certify gate (cordoned, tainted uncertified, labelled); a scan never
puts a node back: only `gpuboot certify` (bandwidth probes, a certificate) does that.

A rule the harness could not judge (ERROR: an unreachable node, a probe that timed out) is
neither drift nor a fix: it is listed as not judged, and the node's last known state of that
rule carries over to the next scan. Each record also keeps the node's boot id and hardware
faults, from which gpuboot.escalation turns a fault back after N reboots into an RMA, and its
error counters (``counters``: the groups read, the counts above 0), from which gpuboot.trends
warns of a counter growing faster than the SKU's rate, or a bandwidth drifting down, over the
node's own scans (rules TRD-001..005: WARN, never FAIL).

Exit codes (a scheduler tells new trouble from old): 0 nothing failing; 1 new drift (a rule
newly failing, a first scan's failures, a new RMA escalation); 4 nothing new, but a node or
rule could not be judged (unreachable, harness ERROR); 5 still failing as at the last scan,
nothing new. 2 and 3 keep their meaning (bad input, the run broke).
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import stat
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from gpuboot import escalation, locks, paths, trends
from gpuboot.bundle.model import Evidence
from gpuboot.errors import BadInput, GpubootError
from gpuboot.inventory import Inventory
from gpuboot.report._util import parse_iso
from gpuboot.results import Drift, NodeReport, RunReport
from gpuboot.verdict import BAD, VERDICTS, Status
from gpuboot.yamlsafe import loads_json_bounded, read_capped_bytes

HISTORY_NAME = "scan-history.jsonl"
HISTORY_HINT = "pass --history FILE in a writable directory (default $GPUBOOT_HOME)"
# Compaction (History, _compact): a node's scans fold into one record (STATE), the trend
# page's points into a few (TREND) over the last TREND_SCANS_KEPT scans (a year of hourly
# ones); lines no scan can use go to <history>.rejected.
STATE, TREND = "state", "trend"
# An operator's release of a node (`gpuboot node release`): its RMA escalation ends and its
# faults' boot counts start afresh; the node's last scan stays its last scan.
RELEASED = "released"
TREND_SCANS_KEPT = 8760
COMPACT_MIN_BYTES = 256 * 1024  # a smaller history is only appended to
# A scan writes lines of a few KB and compaction keeps the file near twice its compacted
# size: far past these, a line or a file is not a history a scan wrote. A line nested
# deeper than yamlsafe.MAX_DEPTH is skipped like any other bad line.
MAX_HISTORY_LINE = 16 * 1024 * 1024
MAX_HISTORY_BYTES = 1024 * 1024 * 1024
REJECTED_SUFFIX = ".rejected"
# what drift, escalation and `gpuboot status` read of a node's last scan (its boot id,
# faults and GPUs live on in the folded state; its figures in the trend's records)
LAST_KEPT = ("host", "time", "run_id", "verdict", "failing", "new", "escalated")

EXIT_CLEAN = 0
EXIT_NEW_DRIFT = 1
EXIT_UNJUDGED = 4
EXIT_STILL_FAILING = 5


def default_history() -> Path:
    return paths.home() / HISTORY_NAME


def _problem(rec: Any) -> str | None:
    """What makes a history record unusable as a node's previous scan, if anything."""
    if not isinstance(rec, dict):
        return f"is not a JSON object but {type(rec).__name__}"
    if RELEASED in rec:
        if not isinstance(rec.get("host"), str) or not isinstance(rec.get("time"), str):
            return "is a release without 'host' and 'time'"
        return None if rec[RELEASED] is True else "has 'released' that is not true"
    for key, kind in (("host", str), ("time", str), ("failing", dict)):
        if key not in rec:
            return f"has no {key!r}"
        if not isinstance(rec[key], kind):
            return f"has {key!r} that is not a {kind.__name__}"
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in rec["failing"].items()):
        return "has 'failing' that is not rule -> status"
    if STATE in rec:  # a compacted node: its state is checked whole, never half trusted
        state = rec[STATE]
        known = state.get("known") if isinstance(state, dict) else None
        if not isinstance(known, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in known.items()
        ):
            return "has a 'state' whose 'known' is not rule -> status"
        try:
            escalation.FaultHistory.from_json(state)
            if "trends" in state:
                trends.Window.from_json(state["trends"])
        except ValueError as exc:
            return f"has a 'state' that {exc}"
    return None


def _sample(rec: dict[str, Any]) -> trends.Sample | None:
    """The counters a scan record kept, or None where it kept none (an older scan, a node
    that could not be read) or kept them malformed: the node's trends skip that scan."""
    counters = rec.get("counters")
    if not isinstance(counters, dict):
        return None
    boot = rec.get("boot_id")
    doc = [rec["time"], boot if isinstance(boot, str) else None]
    try:
        return trends.Sample.from_json([*doc, counters.get("read"), counters.get("values"), 1])
    except ValueError:
        return None


class NodeHistory:
    """One node's history folded record by record: its latest record, the rules last known
    failing (a rule the harness could not judge keeps what was known of it before) and its
    hardware faults per boot (gpuboot.escalation). A compacted record (``state``) carries
    this fold of every scan before it and replaces what came before."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None
        self.known: dict[str, str] = {}
        self.faults = escalation.FaultHistory()
        self.window = trends.Window()  # its counters' samples of this boot, its figures

    def add(self, rec: dict[str, Any]) -> None:
        escalated = rec.get("escalated") if isinstance(rec.get("escalated"), list) else ()
        if STATE in rec:
            self.known = dict(rec[STATE]["known"])
            self.faults = escalation.FaultHistory.from_json(rec[STATE], escalated)
            if "trends" in rec[STATE]:
                self.window = trends.Window.from_json(rec[STATE]["trends"])
            self.last = {k: v for k, v in rec.items() if k != STATE}
            return
        known = {r: s for r, s in rec["failing"].items() if s != Status.ERROR}
        for rule, status in rec["failing"].items():
            if status == Status.ERROR and rule in self.known:
                known[rule] = self.known[rule]
        self.known, self.last = known, rec
        faults = rec.get("faults")
        self.faults.add(
            rec["time"],
            rec.get("boot_id"),
            faults if isinstance(faults, list) else (),
            escalated,
            rec.get("gpus") if isinstance(rec.get("gpus"), dict) else None,
        )
        if (sample := _sample(rec)) is not None:
            self.window.add(sample)
        self.window.add_figures(rec["time"], rec.get("figures"))

    def release(self) -> None:
        """An operator released the node: no escalation stays open, and a fault counts its
        boots afresh (a part back in service is not held to its old count)."""
        self.faults.release()
        if self.last is not None:
            self.last = {**self.last, "escalated": []}

    def baseline(self) -> dict[str, Any] | None:
        """The previous scan as drift() reads it: its time, the rules known failing."""
        return {"time": self.last["time"], "failing": self.known} if self.last else None

    def compacted(self) -> dict[str, Any]:
        """The one record that stands for every scan of this node: what consumers read of
        its latest record (LAST_KEPT) and the folded state; nothing reads older records."""
        assert self.last is not None
        last = {k: v for k, v in self.last.items() if k in LAST_KEPT}
        state = {**self.faults.to_json(), "known": self.known, "trends": self.window.to_json()}
        return {**last, STATE: state}


class _Trend:
    """The trend page's input (gpuboot/report/trend.py: series) in few records: per scan,
    only the nodes whose trend state (rules failing, a rule not judged keeping its last known
    state; the verdict, so a WARN stays a WARN on the page) changed or that measured figures,
    written as that state, or one unchanged node so the scan keeps its point; the last
    TREND_SCANS_KEPT scans, those before folded into one record per node. series() gives the
    same points on these as on every record."""

    def __init__(self) -> None:
        # host -> (rules failing, verdict) now; and before the scans kept
        self.state: dict[str, tuple[frozenset[str], str | None]] = {}
        self.seed: dict[str, tuple[frozenset[str], str | None]] = {}
        self.scans: deque[list[dict[str, Any]]] = deque()
        self.time: str | None = None  # the open scan's time (series groups records by it)
        self.first = ""  # the open scan's first node
        self.open: list[dict[str, Any]] | None = None  # None: a time series() skips

    def _record(
        self, host: str, time: str, state: tuple[frozenset[str], str | None]
    ) -> dict[str, Any]:
        failing, verdict = state
        rec = {
            TREND: 1,
            "host": host,
            "time": time,
            "failing": dict.fromkeys(sorted(failing), Status.FAIL),
        }
        return {**rec, "verdict": verdict} if verdict else rec

    def _group(self) -> list[dict[str, Any]]:
        """The open scan's records; none changed: its first node as it is (a point)."""
        assert self.open is not None and self.time is not None
        return self.open or [self._record(self.first, self.time, self.state[self.first])]

    def _close(self) -> None:
        if self.open is None:
            return
        self.scans.append(self._group())
        while len(self.scans) > TREND_SCANS_KEPT:
            for rec in self.scans.popleft():
                self.seed[rec["host"]] = (frozenset(rec["failing"]), rec.get("verdict"))
        self.open = None

    def add(self, rec: dict[str, Any]) -> None:
        if rec["time"] != self.time:
            self._close()
            self.time, self.first = rec["time"], rec["host"]
            try:
                parse_iso(self.time)
                self.open = []
            except ValueError:  # series() skips such a scan whole, state included
                self.open = None
        if self.open is None:
            return
        host, failing = rec["host"], rec["failing"]
        before = self.state.get(host)
        known = before[0] if before else frozenset()
        kept = {r for r, st in failing.items() if st == Status.ERROR} & known
        verdict = rec.get("verdict")
        now = (
            frozenset({r for r, st in failing.items() if st == Status.FAIL} | kept),
            verdict if isinstance(verdict, str) and verdict in VERDICTS else None,
        )
        self.state[host] = now
        figures = rec.get("figures")
        if now != before or (isinstance(figures, dict) and figures):
            out = self._record(host, rec["time"], now)
            if isinstance(figures, dict) and figures:
                out["figures"] = figures
            self.open.append(out)

    def records(self) -> list[dict[str, Any]]:
        scans = [*self.scans, *([self._group()] if self.open is not None else [])]
        if not scans:
            return []
        first = scans[0][0]["time"]  # the nodes known before the first scan kept, then
        out = [self._record(h, first, f) for h, f in self.seed.items()]
        for group in scans:
            out += group
        return out


class History:
    """A history file read in one pass: every node's fold (drift, escalation, status) and
    the trend page's records, the lines no scan can use (kept aside when compacting) and
    how many bytes are records as scans wrote them vs compacted ones (compaction is due
    once the former outweigh the latter: the file stays within about twice its compacted
    size)."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeHistory] = {}
        self.trend = _Trend()
        self.rejected: list[bytes] = []
        self.raw = 0
        self.kept = 0

    @classmethod
    def parse(cls, data: bytes, name: Path, warn: Callable[[str], None]) -> History:
        """Every line of a history file's bytes, in file order. A line that is not a whole,
        well-formed record (a torn line from a killed scan, a hand edit, another encoding,
        a compacted record that fails its checks) is skipped with a warning naming the
        file and line: one bad line never breaks the scans after it."""
        hist = cls()
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            if len(raw) > MAX_HISTORY_LINE:
                warn(
                    f"{name}:{number}: warning: longer than {MAX_HISTORY_LINE} bytes; line skipped"
                )
                hist.rejected.append(raw)
                continue
            try:
                rec = loads_json_bounded(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                warn(f"{name}:{number}: warning: not UTF-8 (byte {exc.start}); line skipped")
                hist.rejected.append(raw)
                continue
            except ValueError as exc:  # includes a torn last line from a killed scan
                warn(f"{name}:{number}: warning: not a JSON record ({exc}); line skipped")
                hist.rejected.append(raw)
                continue
            if problem := _problem(rec):
                warn(f"{name}:{number}: warning: the record {problem}; line skipped")
                hist.rejected.append(raw)
                continue
            hist.add(rec, len(raw) + 1)
        return hist

    def add(self, rec: dict[str, Any], size: int) -> None:
        if RELEASED in rec:  # folded into the node's state at the next compaction
            if node := self.nodes.get(rec["host"]):
                node.release()
            self.raw += size
        elif rec.get(TREND):
            self.trend.add(rec)
            self.kept += size
        elif STATE in rec:
            self.nodes[rec["host"]] = node = NodeHistory()
            node.add(rec)
            self.kept += size
        else:
            self.nodes.setdefault(rec["host"], NodeHistory()).add(rec)
            self.trend.add(rec)
            self.raw += size

    def due(self) -> bool:
        return self.raw >= max(self.kept, COMPACT_MIN_BYTES)

    def compacted(self) -> bytes:
        recs = self.trend.records() + [n.compacted() for n in self.nodes.values() if n.last]
        return b"".join(json.dumps(r, sort_keys=True).encode() + b"\n" for r in recs)


def load_history(history: Path, warn: Callable[[str], None] = lambda _m: None) -> History:
    """The history as it is on disk (an empty one if there is none yet); one that is not
    a regular file (a FIFO, a device, a link) or past MAX_HISTORY_BYTES is BadInput."""
    if not os.path.lexists(history):
        return History()
    data = read_capped_bytes(history, MAX_HISTORY_BYTES, "scan history", hint=HISTORY_HINT)
    return History.parse(data, history, warn)


def _read_open_history(fh: IO[bytes], history: Path) -> bytes:
    """The whole of the open history, refused past MAX_HISTORY_BYTES."""
    fh.seek(0)
    data = fh.read(MAX_HISTORY_BYTES + 1)
    if len(data) > MAX_HISTORY_BYTES:
        raise BadInput(
            f"is larger than {MAX_HISTORY_BYTES} bytes (the cap): not a history scans wrote",
            where=f"scan history {history}",
            hint=HISTORY_HINT,
        )
    return data


@dataclass(frozen=True)
class ScanResult:
    """A scan: its report (each node with its drift, unjudged rules and escalations), the
    history it read and appended to, as held in memory then (whatever comes next, the trend
    page, reads that, not the file again) and where that history lives."""

    report: RunReport
    history: History
    history_path: Path

    @property
    def passed(self) -> bool:
        """A scan passes while no node fails (a WARN node stays in service)."""
        return all(n.verdict not in BAD for n in self.report.nodes)

    def exit_code(self) -> int:
        return exit_code(self.report.nodes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON `gpuboot scan` prints: the run's report, then the history and exit code."""
        doc = self.report.to_dict()
        doc["passed"] = self.passed
        return {**doc, "history": str(self.history_path), "exit_code": self.exit_code()}


def last_records(
    history: Path, *, warn: Callable[[str], None] = lambda _m: None
) -> dict[str, dict[str, Any]]:
    """host -> its most recent scan record (bad lines skipped with a warning: History)."""
    return {h: n.last for h, n in load_history(history, warn).nodes.items() if n.last}


def read_history(
    history: Path, *, warn: Callable[[str], None] = lambda _m: None
) -> dict[str, NodeHistory]:
    """host -> its folded history (bad lines skipped with a warning, as last_records)."""
    return load_history(history, warn).nodes


def history_records(
    history: Path, *, warn: Callable[[str], None] = lambda _m: None
) -> list[dict[str, Any]]:
    """The trend page's input: records whose series() is every record's (_Trend)."""
    return load_history(history, warn).trend.records()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _set_aside(target: Path, lines: list[bytes]) -> Path:
    """Lines no scan can use, appended to ``<history>.rejected`` (private) for the operator."""
    path = target.with_name(target.name + REJECTED_SUFFIX)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"".join(line + b"\n" for line in lines))
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def _compact(history: Path, hist: History, warn: Callable[[str], None]) -> None:
    """Replace the history by its compacted form: a new file beside it (its mode and
    owner), fsynced, renamed over it. Anything failing before the rename (a full disk,
    Ctrl-C) leaves the old file whole and removes the new one. The caller holds the lock."""
    target = Path(os.path.realpath(history))
    st = os.stat(target)
    data = hist.compacted()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".compacting", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
            if (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                with contextlib.suppress(OSError):  # root scanning a user's history
                    os.fchown(out.fileno(), st.st_uid, st.st_gid)
            os.fsync(out.fileno())
        aside = _set_aside(target, hist.rejected) if hist.rejected else None
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)
    if aside:
        warn(
            f"{history}: warning: {len(hist.rejected)} line(s) no scan can use moved to "
            f"{aside} (history compacted)"
        )
    hist.rejected, hist.kept, hist.raw = [], len(data), 0


def compact_history(history: Path, *, warn: Callable[[str], None] = lambda _m: None) -> None:
    """Compact ``history`` now, under the scans' lock (scans also do it when due)."""
    with (
        _open_history(history) as first,
        locks.exclusive_current(first, history, lambda: _open_history(history)) as fh,
    ):
        hist = History.parse(_read_open_history(fh, history), history, warn)
        _compact(history, hist, warn)


def drift(now: dict[str, str], before: dict[str, Any] | None) -> Drift:
    """What changed for one node: ``new`` (failing now, not at the previous scan, or
    every failure on a first scan), ``still`` and ``cleared`` rule ids. A rule ERROR now
    (the harness could not judge it) is none of these: see :func:`unjudged`; an ERROR in
    ``before`` is no knowledge of that rule either."""
    was = {r for r, s in before["failing"].items() if s != Status.ERROR} if before else set()
    fail = {r for r, s in now.items() if s != Status.ERROR}
    return Drift(
        previous_scan=before["time"] if before else None,
        new=tuple(sorted(fail - was)),
        still=tuple(sorted(fail & was)),
        cleared=tuple(sorted(r for r in was if r not in now)),
    )


def unjudged(now: dict[str, str]) -> tuple[str, ...]:
    """Rules the harness could not judge this scan (ERROR): they say nothing of drift."""
    return tuple(sorted(r for r, s in now.items() if s == Status.ERROR))


def exit_code(nodes: tuple[NodeReport, ...]) -> int:
    """The scan's exit code (module docstring): new drift first, then not judged, then
    still failing."""
    drifts = [n.drift for n in nodes if n.drift is not None]
    if any(d.new for d in drifts) or any(e.new for n in nodes for e in n.escalations or ()):
        return EXIT_NEW_DRIFT
    if any(n.unjudged for n in nodes):
        return EXIT_UNJUDGED
    if any(d.still for d in drifts):
        return EXIT_STILL_FAILING
    return EXIT_CLEAN


def _append(fh: IO[bytes], lines: list[bytes]) -> None:
    # A scan killed mid-write leaves a torn line: end it so this one stands alone.
    fh.seek(0, 2)
    if size := fh.tell():
        fh.seek(size - 1)
        if fh.read(1) != b"\n":
            fh.write(b"\n")  # "a" mode: written at the end whatever the read position
    fh.write(b"".join(lines))
    fh.flush()


def _open_history(history: Path) -> IO[bytes]:
    """The history, opened for reading and appending (created, private, if missing): a
    regular file named itself (a FIFO or a device would be read without end, a link
    replaced by compaction), else BadInput."""
    where = f"scan history {history}"
    try:
        history.parent.mkdir(parents=True, exist_ok=True)
        # O_NONBLOCK: a FIFO opens without waiting for a writer, then is refused
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(history, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInput("is a symbolic link", where=where, hint=HISTORY_HINT) from None
        raise paths.fs_error(exc, where, hint=HISTORY_HINT) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput("is not a regular file", where=where, hint=HISTORY_HINT)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a+b")


def record_release(history: Path, host: str, *, by: str, reason: str) -> None:
    """Record that an operator released ``host``: its open RMA escalation ends (status,
    metrics and labels stop showing it) and its faults count from this moment."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rec = {"time": stamp, "host": host, RELEASED: True, "by": by, "reason": reason}
    append_history(history, [rec])


def append_history(history: Path, records: list[dict[str, Any]]) -> None:
    with (
        _open_history(history) as first,
        locks.exclusive_current(first, history, lambda: _open_history(history)) as fh,
    ):
        _append(fh, [json.dumps(r, sort_keys=True).encode() + b"\n" for r in records])


def drift_lines(nodes: tuple[NodeReport, ...]) -> list[str]:
    """One line per node for the terminal: what changed, what could not be judged, and
    any RMA escalation."""
    lines = []
    for node in nodes:
        d, err = node.drift or Drift(None), node.unjudged
        since = f"since {d.previous_scan}" if d.previous_scan else "first scan"
        changes = [
            f"{k}: {', '.join(getattr(d, k))}" for k in ("new", "still", "cleared") if getattr(d, k)
        ]
        if err and len(err) == (len(node.findings) or len(err)):
            reason = next((f.reason for f in node.findings), "")
            changes = [f"not judged (ERROR: {reason}); no drift counted"]
        elif err:
            changes.append(f"not judged: {', '.join(err)}")
        lines.append(f"{node.host} ({since}): " + ("; ".join(changes) or "no drift"))
        lines += [f"  {escalation.action_text(e)}" for e in node.escalations or ()]
    return lines


def _figures(node: NodeReport) -> dict[str, list[Any]]:
    """figure -> [median, unit, fail_below] of what the scan measured (the trend page,
    gpuboot/report/trend.py, reads them)."""
    out: dict[str, list[Any]] = {}
    for m in node.measurements:
        value = m.get("value")
        if m.get("kind") == "counter":  # a counter (ethtool -S): its growth is in ``counters``
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.setdefault(str(m.get("name")), [value, m.get("unit"), m.get("fail_below")])
    return out


def _bundle_profile(host_dir: Path) -> dict[str, Any] | None:
    """The SKU profile the node's evidence was judged against (meta.json names it), or None
    where the bundle does not say (an unreachable node): its trends are not judged then."""
    from gpuboot.bundle.names import META
    from gpuboot.bundle.profile import bundle_profile
    from gpuboot.bundle.store import read_file_capped

    try:
        meta = json.loads(read_file_capped(host_dir / META))
        name = meta.get("profile") if isinstance(meta, dict) else None
        files = {name: read_file_capped(host_dir / name)} if _own_file(host_dir, name) else {}
        return bundle_profile(host_dir.name, meta, files)
    except (GpubootError, ValueError, OSError):
        return None


def _own_file(host_dir: Path, name: Any) -> bool:
    """A profile kept as a file of the host directory (a SKU variant), not a shipped name."""
    from gpuboot.bundle.names import is_safe_name

    return is_safe_name(name) and os.path.lexists(host_dir / name)


def _observe(evidence: Evidence, node: NodeReport) -> tuple[escalation.Observation, trends.Sample]:
    """What a scan reads in a node's evidence besides the rules: its boot and hardware
    faults (escalation), its counters (trends). Run in the judging worker (engine.judge)."""

    def only(names: tuple[str, ...]) -> Evidence:  # as a scan read them from its bundle
        return {name: evidence[name] for name in names if name in evidence}

    return (
        escalation.observe(only(escalation.READS)),
        trends.observe(only(trends.READS), node.measurements),
    )


def _observed(
    node: NodeReport, host_dir: Path | None
) -> tuple[escalation.Observation, trends.Sample | None]:
    """What _observe read in the judging worker (nothing for a node whose evidence was not
    judged: its bundle is never parsed again without a deadline); for a report made
    elsewhere, the same read from its bundle; nothing without one."""
    if node.observed is not None:
        return node.observed
    if host_dir is None:
        return escalation.Observation(), None
    return escalation.observe_bundle(host_dir), trends.observe_bundle(host_dir, node.measurements)


def _with_trends(
    node: NodeReport,
    past: NodeHistory | None,
    host_dir: Path | None,
    scanned: tuple[str, str | None],
    sample: trends.Sample | None,
    profile: dict[str, Any] | None = None,
) -> tuple[NodeReport, dict[str, Any] | None]:
    """``node`` with its trend findings (gpuboot.trends: WARN, never FAIL) and the counters
    its record keeps (None: nothing read). ``scanned``: this scan's time and the node's boot
    id; ``sample``: the counters read in its evidence (None: no evidence). The node's folded
    window is not changed: the record, appended, folds in later."""
    stamp, boot_id = scanned
    if profile is None and host_dir is not None:
        profile = _bundle_profile(host_dir)
    fresh = sample is not None and bool(sample.read or sample.values)
    window = copy.deepcopy(past.window) if past else trends.Window()
    if sample is not None and fresh:
        sample.time, sample.boot_id = stamp, boot_id
        window.add(sample)
    else:  # this scan read no counter: none is judged on an earlier scan's reading
        window.samples = []
    figures = _figures(node)
    window.add_figures(stamp, figures)
    found = trends.judge(window, profile, figures) if profile else []
    if found:
        warned = any(f.status == Status.WARN for f in found)
        verdict = Status.WARN if warned and node.verdict == Status.PASS else node.verdict
        node = replace(node, findings=(*node.findings, *found), verdict=verdict)
    return node, (sample.to_record() if sample is not None and fresh else None)


def scan(
    inventory: str | Path | Inventory,
    *,
    limit: str | None = None,
    probes: str = "none",
    history: Path | None = None,
    progress=lambda _m: None,
    rma_after_reboots: int = escalation.DEFAULT_REBOOTS,
) -> ScanResult:
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
    with _open_history(history) as first:
        report = certify.certify(
            inventory, limit=limit, probes=probes, progress=progress, verb="scan", observe=_observe
        )
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        bundle = report.bundle
        with locks.exclusive_current(first, history, lambda: _open_history(history)) as fh:
            # the one read of this scan
            hist = History.parse(_read_open_history(fh, history), history, progress)
            before = hist.nodes
            records, nodes = [], []
            for judged in report.nodes:
                now = judged.failing()
                past = before.get(judged.host)
                seen, sample = _observed(judged, bundle / judged.host if bundle else None)
                found = escalation.escalations(
                    seen, past.faults if past else None, rma_after_reboots
                )
                moved = drift(now, past.baseline() if past else None)
                node = escalation.apply(replace(judged, drift=moved, unjudged=unjudged(now)), found)
                node, counters = _with_trends(
                    node,
                    past,
                    bundle / judged.host if bundle else None,
                    (stamp, seen.boot_id),
                    sample,
                )
                nodes.append(node)
                records.append(
                    {
                        "time": stamp,
                        "run_id": report.run_id,
                        "inventory": str(inv_path),
                        "host": node.host,
                        "verdict": node.verdict,
                        "failing": now,
                        "new": list(moved.new),
                        "boot_id": seen.boot_id,
                        "faults": sorted(seen.faults),
                        "escalated": [e.fault for e in found],
                        "gpus": seen.parts,
                        "figures": _figures(node),
                        **({"counters": counters} if counters else {}),
                    }
                )
            lines = [json.dumps(r, sort_keys=True).encode() + b"\n" for r in records]
            try:
                _append(fh, lines)
            except OSError as exc:
                raise paths.fs_error(exc, f"scan history {history}", hint=HISTORY_HINT) from exc
            for rec, line in zip(records, lines, strict=True):
                hist.add(rec, len(line))
            if hist.due():
                try:
                    _compact(history, hist, progress)
                except OSError as exc:  # this scan is recorded: only the shrinking waits
                    progress(
                        f"{history}: warning: not compacted ({exc.strerror or exc}); the scan "
                        "is recorded and the history kept as it was"
                    )
    return ScanResult(replace(report, nodes=tuple(nodes)), hist, history)
