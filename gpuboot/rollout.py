"""Rolling installs: hosts in batches, a failure budget, and resuming where a rollout stopped.

gpuboot drives the batches itself (one ansible-runner run per batch) rather than using the
play's ``serial``/``max_fail_percentage``: Ansible's percentage applies per batch, while an
operator's budget is "at most N broken nodes across the whole rollout". Every install run
records its outcome in ``runs/<id>/rollout.json`` so ``--resume`` can pick up the failed
and never-started hosts.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import BadInput

STATE_FILE = "rollout.json"


def _count(text: str, total: int, *, option: str, minimum: int) -> int:
    """``"3"`` or ``"25%"`` of ``total`` as a host count (percentages round up, as Ansible's)."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            pct = float(raw[:-1])
            if not 0 <= pct <= 100:
                raise ValueError
            return max(minimum, math.ceil(total * pct / 100))
        value = int(raw)
        if value < minimum:
            raise ValueError
        return value
    except ValueError:
        raise BadInput(
            f"{option} {text!r} is not a host count (>= {minimum}) or a percentage 0-100%",
            where=f"gpuboot install {option}",
            hint=f"e.g. {option} 1, {option} 10%",
        ) from None


def batch_size(serial: str | None, total: int) -> int:
    return total if serial is None else _count(serial, total, option="--serial", minimum=1)


def failure_budget(max_fail: str | None, total: int) -> int | None:
    """How many hosts may fail before the rollout stops; None: no limit."""
    return None if max_fail is None else _count(max_fail, total, option="--max-fail", minimum=0)


def batches(hosts: list[str], size: int) -> list[list[str]]:
    return [hosts[i : i + size] for i in range(0, len(hosts), size)]


@dataclass
class RolloutState:
    """What one install run was asked to do and what it did, kept beside its results for
    ``--resume``: the settings are recorded so a resumed rollout keeps its batch size,
    budget, tags and drain, whatever the resuming command line says."""

    inventory: str
    hosts: list[str]
    batch_size: int
    budget: int | None
    check: bool = False  # a --check run converges nothing: never resumed from
    converged: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # hosts whose executor was lost before they finished: not done, not failed
    unknown: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the rollout ended before its last batch
    settings: dict[str, Any] = field(default_factory=dict)  # Settings.to_dict()
    resumed_from: str | None = None  # the stopped rollout this run continued

    @property
    def pending(self) -> list[str]:
        """Hosts the rollout never reached."""
        done = set(self.converged) | set(self.failed) | set(self.unknown)
        return [h for h in self.hosts if h not in done]

    @property
    def budget_spent(self) -> bool:
        return self.budget is not None and len(self.failed) > self.budget

    def to_dict(self) -> dict[str, Any]:
        return {
            "inventory": self.inventory,
            "hosts": self.hosts,
            "batch_size": self.batch_size,
            "budget": self.budget,
            "check": self.check,
            "converged": self.converged,
            "failed": self.failed,
            "unknown": self.unknown,
            "pending": self.pending,
            "stopped": self.stopped,
            "settings": self.settings,
            "resumed_from": self.resumed_from,
        }

    def save(self, run_dir: Path) -> None:
        """Replace the record atomically: a kill or a full disk leaves the previous one."""
        paths.write_private(run_dir / STATE_FILE, json.dumps(self.to_dict(), indent=2) + "\n")


@dataclass(frozen=True)
class Settings:
    """What an install was asked to do besides its hosts: recorded in its rollout, given
    back by ``--resume``, spelled out in every hint."""

    limit: str | None = None
    tags: tuple[str, ...] = ()
    serial: str | None = None
    max_fail: str | None = None
    allow_reboot: bool = False
    full: bool = False
    kubeconfig: str | None = None
    k8s_context: str | None = None
    drain_timeout: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "tags": list(self.tags)}

    @classmethod
    def from_record(cls, doc: Any) -> Settings:
        """The settings a record holds; an old record (none) or a wrong type: defaults."""
        doc = doc if isinstance(doc, dict) else {}
        kept: dict[str, Any] = {}
        for name, default in cls().__dict__.items():
            value = doc.get(name, default)
            if name == "tags":
                value = tuple(value) if isinstance(value, list) else ()
                value = tuple(t for t in value if isinstance(t, str))
            elif isinstance(default, bool):
                value = value if isinstance(value, bool) else default
            elif name == "drain_timeout":
                ok = isinstance(value, int | float) and not isinstance(value, bool)
                value = float(value) if ok and value > 0 else None
            elif not isinstance(value, str):
                value = None
            kept[name] = value
        return cls(**kept)

    def command(self, inventory: str | Path, *, check: bool = False) -> str:
        """The `gpuboot install` command line that runs these settings again."""
        words = ["gpuboot", "install", "-i", str(inventory)]
        if check:
            words.append("--check")
        for flag, value in (
            ("--limit", self.limit),
            ("--tags", ",".join(self.tags) or None),
            ("--serial", self.serial),
            ("--max-fail", self.max_fail),
            ("--kubeconfig", self.kubeconfig),
            ("--k8s-context", self.k8s_context),
        ):
            if value:
                words += [flag, value]
        if self.kubeconfig and self.drain_timeout:
            words += ["--drain-timeout", f"{self.drain_timeout:g}"]
        words += [
            f for f, on in (("--allow-reboot", self.allow_reboot), ("--full", self.full)) if on
        ]
        return " ".join(shlex.quote(w) for w in words)


def resume_command(inventory: str | Path, run_id: str) -> str:
    """The hint that continues a stopped rollout: its settings are in its record."""
    return " ".join(
        shlex.quote(w) for w in ("gpuboot", "install", "-i", str(inventory), "--resume", run_id)
    )


# What --resume reads from a record, and the type each must have.
RECORD_KEYS = {
    "inventory": str,
    "check": bool,
    "failed": list,
    "unknown": list,
    "pending": list,
}
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
RECORD_MAX = 16 << 20  # a rollout of thousands of hosts is well under 1 MiB


def read_record(path: Path) -> dict[str, Any]:
    """A rollout record, checked; ValueError names the line or key that is wrong."""
    from gpuboot.errors import ConfigError
    from gpuboot.yamlsafe import loads_json_bounded, read_capped_bytes

    try:  # a regular file within the cap: a FIFO or a huge file is no record
        data = read_capped_bytes(path, RECORD_MAX, "rollout record", hint="")
        doc = loads_json_bounded(data.decode("utf-8"))
    except ConfigError as exc:
        raise ValueError(exc.message) from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg})") from None
    except ValueError as exc:  # nested past the bound
        raise ValueError(str(exc)) from None
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object but {type(doc).__name__}")
    doc.setdefault("unknown", [])  # a record from before executors
    for key, kind in RECORD_KEYS.items():
        if key not in doc:
            raise ValueError(f"key {key!r} is missing")
        value = doc[key]
        if not isinstance(value, kind) or (
            kind is list and not all(isinstance(h, str) for h in value)
        ):
            want = "a list of host names" if kind is list else kind.__name__
            raise ValueError(f"key {key!r} is not {want}: {str(value)[:60]!r}")
    for key in ("batch_size", "budget"):
        value = doc.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise ValueError(f"key {key!r} is not a whole number: {str(value)[:60]!r}")
    return doc


@dataclass(frozen=True)
class Resume:
    """A stopped rollout to continue: its id, the hosts it left (failed, then unknown --
    their executor was lost --, then never reached) and what it was asked to do."""

    run_id: str
    hosts: list[str]
    batch_size: int | None
    budget: int | None
    settings: Settings


def _resume(run_id: str, doc: dict[str, Any]) -> Resume:
    return Resume(
        run_id,
        doc["failed"] + doc["unknown"] + doc["pending"],
        doc.get("batch_size") or None,
        doc.get("budget"),
        Settings.from_record(doc.get("settings")),
    )


def _latest(inventory: Path, wanted: str, warn: Callable[[str], None]) -> Resume:
    """The newest stopped real rollout of the inventory that no later run continued; when
    every rollout finished, the newest real one (with nothing left to do)."""
    runs = paths.runs_dir()
    continued: set[str] = set()
    newest: Resume | None = None
    for candidate in sorted(runs.glob(f"*-install-*/{STATE_FILE}"), reverse=True):
        try:
            doc = read_record(candidate)
        except ValueError as exc:
            warn(f"warning: {candidate}: {exc}; skipped, resuming from an earlier run")
            continue
        if doc["inventory"] != wanted or doc["check"]:
            continue
        run_id = candidate.parent.name
        found = _resume(run_id, doc)
        newest = newest or found
        if found.hosts and run_id not in continued:
            return found
        if isinstance(doc.get("resumed_from"), str):
            continued.add(doc["resumed_from"])
    if newest is None:
        raise BadInput(
            f"no earlier install run of {inventory} to resume",
            where=str(runs),
            hint="run `gpuboot install` without --resume first",
        )
    return replace(newest, hosts=[])


def resume_from(
    inventory: Path, run: str, *, warn: Callable[[str], None] = lambda _m: None
) -> Resume:
    """The rollout ``--resume`` continues: ``run`` is a run id, or ``latest`` for the
    newest stopped real rollout of ``inventory`` (a later run that converged other hosts
    does not hide it). A --check run is never resumed: it changed nothing. With ``latest``
    a malformed record (a crash, a hand edit) is skipped with a warning."""
    runs = paths.runs_dir()
    wanted = str(inventory.resolve())
    if run == "latest":
        return _latest(inventory, wanted, warn)
    path = runs / run / STATE_FILE
    if not RUN_ID.fullmatch(run):
        raise BadInput(
            f"--resume {run!r} is not a run id",
            where="gpuboot install --resume",
            hint="pass an install run id (the run dir's name an install prints), or `latest`",
        )
    if not path.is_file():
        raise BadInput(
            f"run {run!r} has no {STATE_FILE}: not an install run",
            where=str(runs / run),
            hint="pass an install run id (see the run dir an install prints), or `latest`",
        )
    try:
        doc = read_record(path)
    except ValueError as exc:
        raise BadInput(
            f"the run's record is malformed: {exc}",
            where=str(path),
            hint="resume from another run (or `latest`), or install without --resume",
        ) from None
    if doc["inventory"] != wanted:
        raise BadInput(
            f"run {run} installed {doc['inventory']}, not {wanted}",
            where=str(path),
            hint="resume with the inventory that run used",
        )
    if doc["check"]:
        settings = Settings.from_record(doc.get("settings"))
        raise BadInput(
            f"run {run} was a --check run: it changed nothing, so there is nothing to resume",
            where=str(path),
            hint=f"re-run it as a check: {settings.command(inventory, check=True)}",
        )
    return _resume(run, doc)


def check_resume_flags(resume: Resume, given: Settings) -> None:
    """A resumed rollout keeps its recorded batch size, budget and tags: a different value
    on the resuming command line is refused, not silently ignored."""
    recorded = resume.settings
    for flag, now, then in (
        ("--serial", given.serial, recorded.serial),
        ("--max-fail", given.max_fail, recorded.max_fail),
        ("--tags", ",".join(given.tags) or None, ",".join(recorded.tags) or None),
    ):
        if now is not None and now != then:
            raise BadInput(
                f"{flag} {now} differs from the rollout being resumed "
                f"({flag} {then or 'not given'})",
                where=f"gpuboot install --resume {resume.run_id}",
                hint=f"drop {flag}: `--resume` continues run {resume.run_id} with its own "
                "settings; or start a new rollout without --resume",
            )
