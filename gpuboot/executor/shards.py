"""Shards: one executor's hosts of one batch, built on the controller and run at once.

The controller resolves everything a shard's job needs -- the hosts with their variables,
the playbook's name, the extra variables, the nodes' ssh key -- into a private data dir
that only the transmit reads (the executor never reads the operator's inventory), and
removes it once the shard ended. Each shard's journal, artifacts and record
(``job.json``, ``outcome.json``) stay under ``<run_dir>/shards/<executor>-<n>/``: a
resume re-attaches to a lost shard from there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import BadInput, GpubootError
from gpuboot.executor.journal import Journal
from gpuboot.executor.outcome import LOST, UNKNOWN, ShardOutcome
from gpuboot.executor.stream import Executor, ShardJob, artifacts_dir, run_shard

SHARDS_DIR = "shards"
JOB_FILE = "job.json"
OUTCOME_FILE = "outcome.json"
JOURNAL = "journal.jsonl"
RELEASE_TIMEOUT_S = 60.0
INVENTORY = "inventory/hosts.json"
# Variables that are Ansible's own (set again where the play runs) or name a file on the
# controller (the nodes' key travels as the job's env/ssh_key instead).
NOT_TRANSMITTED = frozenset(
    {
        "ansible_config_file",
        "ansible_facts",
        "ansible_version",
        "group_names",
        "inventory_dir",
        "inventory_file",
        "inventory_hostname",
        "inventory_hostname_short",
        "ansible_ssh_private_key_file",
        "ansible_private_key_file",
    }
)
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")


def _key_file(hosts: dict[str, dict[str, Any]]) -> Path | None:
    """The one ssh key the shard's hosts name (ansible-runner loads one, env/ssh_key)."""
    keys = {str(next((v[k] for k in KEY_VARS if v.get(k)), "")) for v in hosts.values()} - {""}
    if len(keys) > 1:
        raise BadInput(
            f"the hosts of one executor name {len(keys)} different ssh keys: "
            + ", ".join(sorted(keys)),
            where="ansible_ssh_private_key_file",
            hint="give the hosts of one domain one key (the job carries one to the executor)",
        )
    return Path(next(iter(keys))).expanduser() if keys else None


def build_job(
    shard_dir: Path,
    hosts: dict[str, dict[str, Any]],
    playbook: str,
    extravars: dict[str, Any] | None = None,
    *,
    runner: dict[str, Any] | None = None,
    **job: Any,
) -> ShardJob:
    """A ShardJob whose private data dir (``<shard_dir>/private``) holds the shard's hosts
    with their resolved variables, the extra variables and the nodes' ssh key. ``runner``:
    more of ansible-runner's arguments (forks, tags, cmdline); ``job``: ShardJob's fields
    (final_task, on_detach, heartbeat_s...). ``playbook`` is a bare name the supervisor
    resolves among its own shipped playbooks."""
    if not playbook or "/" in playbook or playbook.startswith("."):
        raise BadInput(f"playbook {playbook!r} is not a bare name", where="shard job")
    private = paths.private_dir(shard_dir / "private")
    key = _key_file(hosts)
    inventory = {
        str(h): {k: v for k, v in hv.items() if k not in NOT_TRANSMITTED} for h, hv in hosts.items()
    }
    paths.private_dir(private / "inventory")
    # JSON (which Ansible's yaml inventory reads): Ansible's own str types dump as str
    doc = {"all": {"hosts": inventory}}
    paths.write_private(private / INVENTORY, json.dumps(doc, sort_keys=True, default=str))
    env = paths.private_dir(private / "env")
    paths.write_private(env / "extravars", json.dumps(extravars or {}, default=str))
    if key is not None:
        try:
            paths.write_private(env / "ssh_key", key.read_text())
        except OSError as exc:
            raise BadInput(
                f"cannot read the nodes' ssh key {key}: {exc.strerror}",
                where="ansible_ssh_private_key_file",
                hint="point it at a readable private key file",
            ) from exc
    return ShardJob(
        job_id=job.pop("job_id", None) or uuid.uuid4().hex[:16],
        private_data_dir=private,
        runner_kwargs={
            "playbook": playbook,
            "inventory": INVENTORY,
            "settings": {"suppress_ansible_output": True},
            **(runner or {}),
        },
        hosts=tuple(str(h) for h in hosts),
        **job,
    )


def shard_dir(run_dir: Path, executor: str) -> Path:
    """The next free ``<run_dir>/shards/<executor>-<n>/``."""
    root = paths.private_dir(run_dir / SHARDS_DIR)
    n = 1
    while (root / f"{executor}-{n}").exists():
        n += 1
    return paths.private_dir(root / f"{executor}-{n}")


def not_run(hosts: tuple[str, ...] | list[str], reason: str) -> ShardOutcome:
    """The outcome of a shard that never ran (its executor did not answer): every host
    unknown, with the reason."""
    return ShardOutcome(
        state=LOST, status=None, rc=None, reason=reason, hosts={h: UNKNOWN for h in hosts}
    )


def record_job(where: Path, executor: str, job: ShardJob) -> None:
    """What a later resume needs to re-attach to the shard (no secret: the job id, hosts
    and how the shard is judged)."""
    doc = {
        "executor": executor,
        "job_id": job.job_id,
        "hosts": list(job.hosts),
        "final_task": job.final_task,
        "on_detach": job.on_detach,
        "keepalive_s": job.keepalive_s,
        "heartbeat_s": job.heartbeat_s,
        "first_byte_s": job.first_byte_s,
    }
    paths.write_private(where / JOB_FILE, json.dumps(doc, indent=2) + "\n")


def record_outcome(where: Path, out: ShardOutcome) -> None:
    paths.write_private(where / OUTCOME_FILE, json.dumps(out.to_dict(), indent=2) + "\n")


def release(executor: Executor, job_id: str) -> bool:
    """Let the executor drop a job whose stream was read (its collector does it later
    otherwise). True when it did; False when the job is still running there, or the
    executor did not say (a failure changes nothing the controller knows)."""
    try:
        done = subprocess.run(
            executor.command("release", "--job-id", job_id),
            capture_output=True,
            timeout=RELEASE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def run_one(
    executor: Executor,
    job: ShardJob,
    where: Path,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> ShardOutcome:
    """One shard, never raising for the executor's sake: a channel that cannot start is a
    lost shard with the reason. The private data dir (the job's secrets) goes at the end,
    and the executor's spool once the stream was read to its end."""
    record_job(where, executor.name, job)
    try:
        out = run_shard(job, executor, where, on_event)
    except GpubootError as exc:
        out = not_run(job.hosts, f"executor {executor.name}: {exc.message}")
    except OSError as exc:  # the shard's own files (a full disk): the shard is not known
        out = not_run(job.hosts, f"executor {executor.name}: {exc}")
    finally:
        shutil.rmtree(job.private_data_dir, ignore_errors=True)
    record_outcome(where, out)
    if out.state != LOST:  # read to its end; a lost one's spool waits for a re-attach
        release(executor, job.job_id)
    return out


def keep_events(where: Path) -> None:
    """The shard's journaled events as job event files under its artifacts, where a
    controller's run keeps them (what --diff reads)."""
    events = Journal(where / JOURNAL).replay.events
    target = paths.private_dir(artifacts_dir(where) / "job_events")
    for number, event in enumerate(events):
        paths.write_private(target / f"{number}.json", json.dumps(event))


def run_shards(
    jobs: list[tuple[Executor, ShardJob]],
    run_dir: Path,
    on_event: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, ShardOutcome]:
    """Run every job on its executor at once (one thread each); executor name -> outcome.
    Each job was built by ``build_job(shard_dir(run_dir, executor), ...)`` and runs in that
    directory; one job per executor per call. ``on_event(executor, event)`` sees each job
    event once, one call at a time."""
    names = [e.name for e, _ in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"one job per executor per call, got {names}")
    root = (run_dir / SHARDS_DIR).resolve()
    for _, job in jobs:
        if job.private_data_dir.parent.parent.resolve() != root:
            raise ValueError(f"{job.private_data_dir} is not a shard directory of {run_dir}")
    lock = threading.Lock()
    outcomes: dict[str, ShardOutcome] = {}

    def shard(executor: Executor, job: ShardJob) -> None:
        def seen(event: dict[str, Any]) -> None:
            with lock:
                on_event(executor.name, event)

        where = job.private_data_dir.parent
        out = run_one(executor, job, where, seen if on_event is not None else None)
        with lock:
            outcomes[executor.name] = out

    threads = [threading.Thread(target=shard, args=pair, daemon=True) for pair in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {name: outcomes[name] for name in names}
