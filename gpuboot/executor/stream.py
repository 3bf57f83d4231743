"""The controller's side of a shard: transmit a job to an executor's supervisor, read the
worker's stream back, journal it, and judge it.

The executor is reached by an argv (``ssh -- HOST gpuboot-executor-worker`` in production,
a local command in tests) to which the supervisor's subcommand is appended: the only words
the remote shell sees are gpuboot's own (a checked job id, numbers, fixed names), never an
inventory value. The channel runs in a session of its own, so a shard given up on (silent
past the heartbeat) ends its ssh with it and nothing waits for ever.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from gpuboot.errors import BadInput, RunError
from gpuboot.executor import artifacts
from gpuboot.executor.journal import Journal
from gpuboot.executor.outcome import ShardOutcome, judge
from gpuboot.executor.wire import TRAILER_KEY, Cut, Silence, WireReader
from gpuboot.runner import last_line

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
ON_DETACH = ("finish", "cancel")  # what the supervisor does when the controller goes away
# ssh options for the channel: no prompt, and ssh's own keepalive ends a dead TCP path.
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3")
WORKER_COMMAND = "gpuboot-executor-worker"


@dataclass(frozen=True)
class Executor:
    name: str
    argv: tuple[str, ...]  # reaches the supervisor; its subcommand is appended

    @classmethod
    def over_ssh(
        cls, name: str, host: str, options: tuple[str, ...] = (), command: str = WORKER_COMMAND
    ) -> Executor:
        """``command`` reaches the executor's shell: the caller passes a checked path."""
        if not host or host.startswith("-") or any(c.isspace() or ord(c) < 32 for c in host):
            raise BadInput(
                f"executor address {host!r} is not a host name",
                where=f"executor {name}: ansible_host",
                hint="set ansible_host of the executor to its name or address",
            )
        return cls(name, ("ssh", *SSH_OPTIONS, *options, "--", host, command))

    def command(self, *args: str) -> list[str]:
        return [*self.argv, *args]


@dataclass(frozen=True)
class ShardJob:
    job_id: str
    private_data_dir: Path  # project/, inventory/, env/: what transmit sends
    runner_kwargs: dict[str, Any]  # ansible_runner.run's arguments: playbook, inventory...
    hosts: tuple[str, ...]
    final_task: str | None = None  # a host that reached it is done, whatever follows
    on_detach: str = "finish"
    keepalive_s: int = 5  # whole seconds: the worker takes no fraction
    heartbeat_s: float = 20.0  # silence past it (keepalives on) makes the shard lost
    first_byte_s: float = 60.0  # ssh, the supervisor and the worker starting
    grace_s: float = 10.0  # for the channel to end once the shard is given up

    def __post_init__(self) -> None:
        if not JOB_ID.fullmatch(self.job_id):
            raise BadInput(f"job id {self.job_id!r} is not [A-Za-z0-9_-]{{1,64}}", where="job")
        if self.on_detach not in ON_DETACH:
            raise BadInput(f"on_detach {self.on_detach!r}", where="job", hint="finish or cancel")
        if self.keepalive_s < 1 or self.heartbeat_s <= self.keepalive_s:
            raise BadInput(
                f"heartbeat {self.heartbeat_s:g} s with keepalives every {self.keepalive_s:g} s",
                where="job",
                hint="keepalives on, and a heartbeat timeout longer than their interval",
            )


def _transmit(job: ShardJob, pipe: Any) -> None:
    from ansible_runner.streaming import Transmitter

    try:
        pdd = str(job.private_data_dir)
        Transmitter(_output=pipe, private_data_dir=pdd, **job.runner_kwargs).run()
    except (OSError, ValueError):  # the channel went away: the reader says how it ended
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            pipe.close()


def _end_channel(proc: subprocess.Popen, grace_s: float, closed_cleanly: bool = False) -> None:
    if closed_cleanly:  # ssh is exiting on its own: ended now, its 0 would read as 255 (lost)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


OnEvent = Callable[[dict[str, Any]], None]


def _consume(
    reader: WireReader, journal: Journal, unpack_to: Path, on_event: OnEvent | None
) -> str | None:
    """Journal every unit; why the stream stopped short, or None when it closed between units.
    ``on_event`` sees each job event once, after it is journaled."""
    try:
        for unit in reader.units():
            if unit.kind == "status":
                journal.status(unit.data, reader.offset)
            elif unit.kind == "event":
                if journal.event(unit.data, reader.offset) and on_event is not None:
                    on_event(unit.data)
            elif unit.kind == "artifacts":
                artifacts.unpack(unit.data, unpack_to)
                journal.rc(_read_rc(unpack_to), reader.offset)
            elif unit.kind == "eof":
                journal.eof(reader.offset)
            elif unit.kind == "trailer":
                journal.trailer(unit.data[TRAILER_KEY], reader.offset)
    except Silence as exc:
        return f"the executor went silent: {exc} with keepalives on (half-open or stopped)"
    except Cut as exc:
        return f"the stream was cut: {exc}"
    return None


def artifacts_dir(shard_dir: Path) -> Path:
    """Where a shard's artifacts are unpacked: ``artifacts/job/`` as in a controller's run
    (its ``job_events/`` stays empty: a streamed job's events are in the journal)."""
    return shard_dir / "artifacts" / "job"


def _read_rc(where: Path) -> int | None:
    try:
        return int((where / "rc").read_text().strip())
    except (OSError, ValueError):
        return None


def _run_channel(
    job: ShardJob,
    argv: list[str],
    shard_dir: Path,
    journal: Journal,
    feed: Callable[[Any], None] | None,
    on_event: OnEvent | None,
) -> ShardOutcome:
    shard_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with (shard_dir / "channel.err").open("ab") as err:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if feed else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
    except OSError as exc:
        raise RunError(f"cannot reach the executor: {exc}", where=argv[0]) from exc
    sender = None
    if feed is not None:
        sender = threading.Thread(target=feed, args=(proc.stdin,), daemon=True)
        sender.start()
    reader = WireReader(
        proc.stdout.fileno(),
        heartbeat_s=job.heartbeat_s,
        first_byte_s=job.first_byte_s,
        offset=journal.replay.offset,
    )
    cut: str | None = None
    closed_cleanly = False
    try:
        cut = _consume(reader, journal, artifacts_dir(shard_dir), on_event)
        closed_cleanly = cut is None
    finally:
        _end_channel(proc, job.grace_s, closed_cleanly)
        proc.stdout.close()
        journal.close()
    if sender is not None:
        sender.join(job.grace_s)
    out = judge(
        journal.replay, job.hosts, final_task=job.final_task, channel_rc=proc.returncode, cut=cut
    )
    said = _last_words(shard_dir / "channel.err")
    if out.reason and said:
        out.reason = f"{out.reason}; the channel said: {said}"
    return out


def _last_words(path: Path) -> str:
    """The last line ssh or the supervisor wrote on stderr (why a channel failed)."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - 4096))
            return last_line(fh.read().decode(errors="replace"))
    except OSError:
        return ""


def run_shard(
    job: ShardJob, executor: Executor, shard_dir: Path, on_event: OnEvent | None = None
) -> ShardOutcome:
    """Transmit ``job`` to ``executor`` and read its stream to the end, journaled under
    ``shard_dir`` (journal.jsonl, artifacts/, channel.err)."""
    argv = executor.command(
        "run",
        "--job-id",
        job.job_id,
        "--keepalive-seconds",
        str(job.keepalive_s),
        "--on-detach",
        job.on_detach,
    )
    journal = Journal(shard_dir / "journal.jsonl")
    return _run_channel(job, argv, shard_dir, journal, partial(_transmit, job), on_event)


def attach_shard(
    job: ShardJob, executor: Executor, shard_dir: Path, on_event: OnEvent | None = None
) -> ShardOutcome:
    """Read the rest of a shard's spooled stream from where its journal stops: after the
    controller's side went away, every event arrives once."""
    journal = Journal(shard_dir / "journal.jsonl")
    offset = str(journal.replay.offset)
    argv = executor.command("attach", "--job-id", job.job_id, "--offset", offset)
    return _run_channel(job, argv, shard_dir, journal, None, on_event)
