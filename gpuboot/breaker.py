"""The breaker: many nodes failing one rule for one reason in one run is a shared cause.

A wrong threshold pushed to a profile, a broken probe package or a driver rollout that upsets
one check makes most nodes "fail" at the next scan; taking them all out turns a bad day into a
disaster. When at least ``MIN_NODES`` nodes, or ``MIN_SHARE`` of the nodes that rule judged (and
at least two: one node is never a correlation), fail the same rule for the same reason in one
run, the breaker opens for that rule: no node is taken out for it, and it stays open until an
operator runs `gpuboot breaker reset`. A reset only closes it: the next scan judges afresh, and
nothing held back is replayed.

Only FAIL counts: ERROR (the harness could not judge) and unknown never do. "The same reason" is
the finding's text with what differs from node to node normalised away: host names, PCI
addresses, GPU UUIDs, GPU indexes and other numbers (an Xid or SXid code names the fault, so it
is kept). The open breakers live beside the scan history they judge (``$GPUBOOT_HOME/breaker.json``
for the default one: state_for), replaced atomically under a lock; a state file that cannot be
read is an error naming the fix, never taken as "closed".
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import ConfigError
from gpuboot.results import RunReport
from gpuboot.verdict import Status

EXIT_BREAKER_OPEN = 6  # documented in README.md and the epilogs of scan and breaker status
MIN_NODES = 3
MIN_SHARE = 0.2
STATE_NAME = "breaker.json"
HISTORY_SUFFIX = ".breaker.json"  # the state beside a scan history other than the default
STATE_MAX = 16 << 20  # a breaker per rule: a few KB
STATE_VERSION = 1
CLOSED_KEPT = 50  # resets remembered in the state file, newest last
SUSPECT = "suspect the rule, profile, probe or a rollout before the hardware"
JUDGED = (Status.PASS, Status.WARN, Status.FAIL)  # the rule ran and gave a verdict


@dataclass(frozen=True)
class Trip:
    """One rule failing on many nodes for one reason in one run."""

    rule: str
    reason: str  # normalised: the words every node's finding shares
    nodes: tuple[str, ...]
    judged: int  # nodes the rule judged (PASS, WARN or FAIL) in that run
    opened_at: str  # ISO 8601, UTC
    run_id: str | None = None

    def alert(self, state: Path | None = None) -> str:
        """The one line an operator reads: the rule, the count, the shared reason, the fix
        (the reset of the breakers kept in ``state``, default $GPUBOOT_HOME's)."""
        return (
            f"breaker open for {self.rule}: {len(self.nodes)} of {self.judged} nodes fail it "
            f"for the same reason: {self.reason}; {SUSPECT}; after fixing: "
            f"{reset_command(state, self.rule)}"
        )

    def to_dict(self, state: Path | None = None) -> dict[str, Any]:
        return {**asdict(self), "nodes": list(self.nodes), "alert": self.alert(state)}

    @classmethod
    def from_dict(cls, doc: Any) -> Trip:
        """A trip as the state file holds it; ValueError if it is not one."""
        if not isinstance(doc, Mapping):
            raise ValueError("an open breaker is not an object")
        rule, reason, nodes = doc.get("rule"), doc.get("reason"), doc.get("nodes")
        judged, opened_at, run_id = doc.get("judged"), doc.get("opened_at"), doc.get("run_id")
        if not (isinstance(rule, str) and rule and isinstance(reason, str)):
            raise ValueError("an open breaker has no rule or reason")
        if not (isinstance(nodes, list) and all(isinstance(n, str) for n in nodes)):
            raise ValueError(f"open breaker {rule}: nodes is not a list of names")
        if not isinstance(judged, int) or isinstance(judged, bool) or judged < len(nodes):
            raise ValueError(f"open breaker {rule}: judged is not a count of nodes")
        if not isinstance(opened_at, str) or not (run_id is None or isinstance(run_id, str)):
            raise ValueError(f"open breaker {rule}: opened_at or run_id is not text")
        return cls(rule, reason, tuple(nodes), judged, opened_at, run_id)


# ------------------------------------------------------------------ correlation (pure)
_UUID = re.compile(
    r"\b(?:(?:GPU|MIG)-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12}\b"
)
_PCI = re.compile(r"\b(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
# an Xid/SXid code (and a chain of them, 45/43) names the fault: kept; any other number goes
# (a digit inside a name, mlx5_0 or sm_90, is part of the name)
_NUMBER = re.compile(
    r"\b(S?Xids?\s+)(\d+(?:/\d+)*)|\b0x[0-9a-fA-F]+\b|(?<![A-Za-z0-9_])\d+(?:\.\d+)*"
)
_LIST = re.compile(r"<(\w+)>(?:\s*(?:,|/|-|and)\s*<\1>)+")


def _number(m: re.Match[str]) -> str:
    return m[0] if m[1] else "<n>"


def normalise(reason: str, hosts: Iterable[str] = ()) -> str:
    """``reason`` without what differs between nodes that share a cause: host names (of
    ``hosts``), GPU UUIDs, PCI addresses, then numbers (GPU indexes, figures, versions); a
    list of them ("GPU 0, 1, 3") is one placeholder."""
    text = reason
    for host in sorted(set(hosts), key=len, reverse=True):
        if host:
            text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", "<host>", text)
    text = _UUID.sub("<uuid>", text)
    text = _PCI.sub("<pci>", text)
    text = _NUMBER.sub(_number, text)
    text = _LIST.sub(r"<\1>", text)
    return " ".join(text.split())


def _utc_iso(now: datetime | None) -> str:
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def correlated(
    report: RunReport,
    *,
    min_nodes: int = MIN_NODES,
    min_share: float = MIN_SHARE,
    now: datetime | None = None,
) -> list[Trip]:
    """The rules this run's nodes fail together, at most one trip per rule (its largest
    group of nodes sharing a reason), in rule order."""
    hosts = [n.host for n in report.nodes]
    judged: dict[str, int] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for node in report.nodes:
        for rule in {f.rule for f in node.findings if f.status in JUDGED}:
            judged[rule] = judged.get(rule, 0) + 1
        for f in node.findings:
            if f.status == Status.FAIL:
                members = groups.setdefault((f.rule, normalise(f.reason, hosts)), [])
                if node.host not in members:
                    members.append(node.host)
    best: dict[str, tuple[str, list[str]]] = {}
    for (rule, reason), members in groups.items():
        count, of = len(members), judged[rule]
        shared = count >= min_nodes or (count >= 2 and count / of >= min_share)
        if shared and (rule not in best or count > len(best[rule][1])):
            best[rule] = (reason, members)
    at = _utc_iso(now)
    return [
        Trip(rule, reason, tuple(members), judged[rule], at, report.run_id)
        for rule, (reason, members) in sorted(best.items())
    ]


def holds(report: RunReport, open_rules: Mapping[str, Trip]) -> dict[str, str]:
    """host -> why it is held back, for each node whose failing rules are all open breakers:
    it is flagged, not taken out. (ERROR never takes a node out, so it does not count.)"""
    out = {}
    for node in report.nodes:
        failed = sorted({f.rule for f in node.findings if f.status == Status.FAIL})
        if failed and all(rule in open_rules for rule in failed):
            out[node.host] = (
                f"breaker open for {', '.join(failed)} (a cause shared by many nodes): "
                f"held back, not taken out; {SUSPECT}"
            )
    return out


@dataclass(frozen=True)
class RunBreaker:
    """What the breaker made of one run: this run's trips, the breakers open after it (and
    which it opened), the nodes held back."""

    state: Path
    trips: Mapping[str, Trip]  # rule -> this run's trip
    open: Mapping[str, Trip]  # rule -> the trip that opened it (this run's or an earlier one)
    opened: tuple[str, ...]
    held: Mapping[str, str]  # host -> why (holds)

    def alerts(self) -> list[str]:
        """One line per open breaker, in this run's numbers where it tripped again."""
        lines = []
        for rule, first in sorted(self.open.items()):
            line = self.trips.get(rule, first).alert(self.state)
            if rule not in self.opened:
                line += f" (open since {first.opened_at}, run {first.run_id or 'unknown'})"
            lines.append(line)
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": str(self.state),
            "opened": list(self.opened),
            "open": [t.to_dict(self.state) for _r, t in sorted(self.open.items())],
            "alerts": self.alerts(),
            "held": dict(self.held),
        }


def after_run(
    report: RunReport, state: BreakerState | None = None, *, now: datetime | None = None
) -> RunBreaker:
    """Open the breakers this run's correlated failures trip; what that leaves open and
    which nodes it holds back."""
    state = state or BreakerState()
    trips = correlated(report, now=now)
    opened = state.trip(trips)
    open_rules = state.open_rules()
    return RunBreaker(
        state=state.path,
        trips={t.rule: t for t in trips},
        open=open_rules,
        opened=tuple(t.rule for t in opened),
        held=holds(report, open_rules),
    )


# ------------------------------------------------------------------ the state file
def default_path() -> Path:
    return paths.home() / STATE_NAME


def reset_command(state: Path | None, rule: str | None = None, action: str = "reset") -> str:
    """The command that closes ``rule``'s breaker (every one: None) in ``state`` (or another
    ``action`` of `gpuboot breaker` on that state)."""
    words = ["gpuboot", "breaker", action, *(["--rule", rule] if rule else [])]
    if state is not None and state != default_path():  # kept beside its scan history
        words += ["--history", str(state.with_name(state.name.removesuffix(HISTORY_SUFFIX)))]
    return shlex.join(words)


def state_for(history: Path | None) -> Path:
    """The breaker state of the fleet a scan history records: ``$GPUBOOT_HOME/breaker.json``
    beside the default history, ``<history>.breaker.json`` beside any other (two fleets
    scanned into two histories, or a test's own history, do not share breakers)."""
    from gpuboot.scan import default_history

    if history is None or Path(history).resolve() == default_history().resolve():
        return default_path()
    history = Path(history).resolve()
    return history.with_name(history.name + HISTORY_SUFFIX)


class BreakerState:
    """The open breakers, kept in ``path`` (default ``$GPUBOOT_HOME/breaker.json``)."""

    def __init__(self, path: Path | None = None):
        self.path = path or default_path()

    def _corrupt(self, why: str) -> ConfigError:
        return ConfigError(
            f"the breaker state cannot be read ({why}): gpuboot does not know which rules "
            "it must not take nodes out for",
            where=str(self.path),
            hint="restore the file from a backup, or close every breaker after checking the "
            f"rules: {reset_command(self.path)} (sets the file aside; the next scan judges "
            "afresh)",
        )

    def _read(self) -> dict[str, Any]:
        from gpuboot.yamlsafe import loads_json_bounded, read_capped_bytes

        if not os.path.lexists(self.path):
            return {"version": STATE_VERSION, "open": {}, "closed": []}
        try:  # a regular file within the cap: a FIFO or a link is no state of ours
            data = read_capped_bytes(self.path, STATE_MAX, "breaker state", hint="")
        except ConfigError as exc:
            raise self._corrupt(exc.message) from None
        try:
            doc = loads_json_bounded(data)
        except ValueError as exc:
            raise self._corrupt(f"not JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
            raise self._corrupt(f"not a version {STATE_VERSION} breaker state")
        if not isinstance(doc.get("open"), dict) or not isinstance(doc.get("closed"), list):
            raise self._corrupt("no object of open breakers or list of closed ones")
        try:
            doc["open"] = {rule: Trip.from_dict(t) for rule, t in doc["open"].items()}
        except ValueError as exc:
            raise self._corrupt(str(exc)) from None
        if any(rule != t.rule for rule, t in doc["open"].items()):
            raise self._corrupt("an open breaker is filed under another rule's name")
        return doc

    def _write(self, doc: dict[str, Any]) -> None:
        out = {
            **doc,
            "open": {rule: t.to_dict(self.path) for rule, t in sorted(doc["open"].items())},
        }
        out["closed"] = doc["closed"][-CLOSED_KEPT:]
        paths.write_private(self.path, json.dumps(out, indent=2) + "\n")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Read-change-write under an exclusive flock of a lock file beside the state (the
        state itself is renamed over: a lock on it would guard a file no longer there)."""
        from gpuboot import locks

        if not self.path.parent.is_dir():  # an existing one (a history's) keeps its mode
            paths.private_dir(self.path.parent)
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            # held open for the whole block below, not a with: its own errors are not ours
            fh = open(lock, "a")  # noqa: SIM115
        except OSError as exc:
            raise paths.fs_error(exc, f"breaker lock {lock}") from exc
        with fh, locks.exclusive(fh):
            yield

    def open_rules(self) -> dict[str, Trip]:
        """rule -> the trip that opened its breaker; an unreadable state raises ConfigError."""
        return dict(self._read()["open"])

    def trip(self, trips: list[Trip]) -> list[Trip]:
        """Open the breaker of each trip's rule; the trips that newly opened one (a rule
        already open keeps the trip that opened it)."""
        if not trips:
            self._read()  # a corrupt state is reported even when nothing trips
            return []
        with self._locked():
            doc = self._read()
            opened = [t for t in trips if t.rule not in doc["open"]]
            if opened:
                doc["open"].update({t.rule: t for t in opened})
                self._write(doc)
        return opened

    def set_aside_unreadable(self, now: datetime | None = None) -> Path | None:
        """Move a state that cannot be read aside (kept for the operator, beside it) and
        return where; None when it reads. What `gpuboot breaker reset` does first: closing
        every breaker is the fix an unreadable state names."""
        with self._locked():
            try:
                self._read()
                return None
            except ConfigError:
                stamp = _utc_iso(now).replace(":", "")
                aside = self.path.with_name(f"{self.path.name}.unreadable-{stamp}")
                try:
                    self.path.rename(aside)
                except OSError as exc:
                    raise paths.fs_error(exc, f"breaker state {self.path}") from exc
                return aside

    def reset(
        self, rule: str | None = None, *, reason: str | None = None, now: datetime | None = None
    ) -> list[str]:
        """Close ``rule``'s breaker (every breaker: None); the rules closed, each kept in
        the state's list of closed breakers with the time and ``reason``."""
        with self._locked():
            doc = self._read()
            closing = (
                sorted(doc["open"]) if rule is None else [r for r in [rule] if r in doc["open"]]
            )
            if not closing:
                return []
            at = _utc_iso(now)
            for r in closing:
                trip = doc["open"].pop(r)
                closed = {**trip.to_dict(self.path), "closed_at": at, "reset_reason": reason}
                doc["closed"].append(closed)
            self._write(doc)
        return closing
