"""A resumed run's lost shards: each read once more from its executor's spool, then released.

An install's shard goes on into the executor's spool when the controller loses it
(``on_detach=finish``): before a resume runs anything, the controller attaches to each
lost shard of the run it resumes once, from where its journal stops, so a host that
finished there is read, not re-run; then the executor may drop the job. What still
cannot be read stays unknown, and the resume runs it again -- unless the job is still
running there (a frozen or stalled job whose executor answers): its hosts are left alone,
unknown, never run a second time beside it, and the resuming run keeps the shard's record
so the next resume reads it once the job has ended.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot import paths
from gpuboot.errors import GpubootError
from gpuboot.executor import route
from gpuboot.executor.batch import shard_results
from gpuboot.executor.outcome import LOST
from gpuboot.executor.shards import JOB_FILE, OUTCOME_FILE, SHARDS_DIR, record_outcome, release
from gpuboot.executor.stream import ShardJob, attach_shard
from gpuboot.runner import HostResult

if TYPE_CHECKING:
    from gpuboot.inventory import Inventory

RECORD_MAX = 1 << 20


def _read(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > RECORD_MAX:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def lost_shards(run_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The run's shards not known complete (lost, or the controller died while reading
    them), each with its job record."""
    found = []
    for where in sorted((run_dir / SHARDS_DIR).glob("*")):
        record = _read(where / JOB_FILE)
        if record is None:
            continue
        outcome = _read(where / OUTCOME_FILE)
        if outcome is None or outcome.get("state") == LOST:
            found.append((where, record))
    return found


def _job(where: Path, record: dict[str, Any]) -> ShardJob:
    return ShardJob(
        job_id=str(record["job_id"]),
        private_data_dir=where / "private",  # gone: an attach transmits nothing
        runner_kwargs={},
        hosts=tuple(str(h) for h in record["hosts"]),
        final_task=record.get("final_task"),
        on_detach=str(record.get("on_detach", "finish")),
        keepalive_s=int(record.get("keepalive_s", 5)),
        heartbeat_s=float(record.get("heartbeat_s", 20.0)),
        first_byte_s=float(record.get("first_byte_s", 60.0)),
    )


@dataclass
class Reattached:
    """What a resume found of the lost shards of the run it resumes."""

    done: dict[str, HostResult] = field(default_factory=dict)  # finished after all
    running: dict[str, HostResult] = field(default_factory=dict)  # still in a live job: unknown
    carried: list[Path] = field(default_factory=list)  # those jobs' shard dirs, read again later


def reattach(inv: Inventory, run_dir: Path, answered: Collection[str]) -> Reattached:
    """Every host a lost shard of ``run_dir`` finished after all (read from the executor's
    spool), and every host whose job is still running there; executors not in
    ``answered`` are not asked."""
    found = Reattached()
    for where, record in lost_shards(run_dir):
        name = str(record.get("executor"))
        if name not in inv.executors or name not in answered:
            continue
        try:
            job = _job(where, record)
            executor = route.executor(inv, name)
            out = attach_shard(job, executor, where)
        except (GpubootError, KeyError, TypeError, ValueError):
            continue  # a record the controller cannot use: its hosts stay to be run
        record_outcome(where, out)
        released = release(executor, job.job_id)
        for host, result in shard_results(name, out, hint="").items():
            if not result.unknown:
                found.done[host] = result
            elif not released:  # the job lives on there (or the executor did not say)
                result.reason = (
                    f"still running in job {job.job_id} on executor {name}, which the "
                    "resumed run started: not run again beside it"
                )
                found.running[host] = result
        if not released and any(h in found.running for h in job.hosts):
            found.carried.append(where)
    return found


def carry_shard(where: Path, run_dir: Path) -> None:
    """A lost shard whose job still runs, kept in the resuming run (its record and journal,
    not its outcome): the next resume re-attaches to it where its journal stops."""
    into = paths.private_dir(run_dir / SHARDS_DIR) / where.name
    shutil.copytree(where, into, ignore=shutil.ignore_patterns(OUTCOME_FILE, "private"))
