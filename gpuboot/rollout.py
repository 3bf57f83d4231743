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
from collections.abc import Callable
from dataclasses import dataclass, field
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
    """What one install run did, kept beside its results for ``--resume``."""

    inventory: str
    hosts: list[str]
    batch_size: int
    budget: int | None
    check: bool = False  # a --check run converges nothing: never resumed from
    converged: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the rollout ended before its last batch

    @property
    def pending(self) -> list[str]:
        """Hosts the rollout never reached."""
        done = set(self.converged) | set(self.failed)
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
            "pending": self.pending,
            "stopped": self.stopped,
        }

    def save(self, run_dir: Path) -> None:
        """Replace the record atomically: a kill or a full disk leaves the previous one."""
        paths.write_private(run_dir / STATE_FILE, json.dumps(self.to_dict(), indent=2) + "\n")


# What --resume reads from a record, and the type each must have.
RECORD_KEYS = {"inventory": str, "check": bool, "failed": list, "pending": list}
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def read_record(path: Path) -> dict[str, Any]:
    """A rollout record, checked; ValueError names the line or key that is wrong."""
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg})") from None
    except OSError as exc:
        raise ValueError(f"unreadable ({exc.strerror or exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object but {type(doc).__name__}")
    for key, kind in RECORD_KEYS.items():
        if key not in doc:
            raise ValueError(f"key {key!r} is missing")
        value = doc[key]
        if not isinstance(value, kind) or (
            kind is list and not all(isinstance(h, str) for h in value)
        ):
            want = "a list of host names" if kind is list else kind.__name__
            raise ValueError(f"key {key!r} is not {want}: {str(value)[:60]!r}")
    return doc


def resume_hosts(
    inventory: Path, run: str, *, warn: Callable[[str], None] = lambda _m: None
) -> tuple[str, list[str]]:
    """(run id, hosts to redo) of an earlier install of ``inventory``: ``run`` is a run id,
    or ``latest`` for the newest install run (not a --check one) of this inventory. With
    ``latest`` a malformed record (a crash, a hand edit) is skipped with a warning."""
    runs = paths.runs_dir()
    wanted = str(inventory.resolve())
    if run == "latest":
        state = None
        for candidate in sorted(runs.glob(f"*-install-*/{STATE_FILE}"), reverse=True):
            try:
                doc = read_record(candidate)
            except ValueError as exc:
                warn(f"warning: {candidate}: {exc}; skipped, resuming from an earlier run")
                continue
            if doc["inventory"] == wanted and not doc["check"]:
                state, path = doc, candidate
                break
        if state is None:
            raise BadInput(
                f"no earlier install run of {inventory} to resume",
                where=str(runs),
                hint="run `gpuboot install` without --resume first",
            )
    else:
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
            state = read_record(path)
        except ValueError as exc:
            raise BadInput(
                f"the run's record is malformed: {exc}",
                where=str(path),
                hint="resume from another run (or `latest`), or install without --resume",
            ) from None
    if state["inventory"] != wanted:
        raise BadInput(
            f"run {path.parent.name} installed {state['inventory']}, not {wanted}",
            where=str(path),
            hint="resume with the inventory that run used",
        )
    return path.parent.name, state["failed"] + state["pending"]
