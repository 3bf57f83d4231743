"""The executor's job directories, and which of them are live.

``<jobs>/<id>/`` holds a job: ``data/`` (the worker's private data dir: the transmitted
inventory, variables and keys), ``stream`` (the worker's stream, spooled), ``meta.json``
and ``worker.err``. Its temp (the worker's TMPDIR and Ansible's local temp) is a directory
of its own in the executor's temp, named in ``meta.json``: short, as mitogen binds its
control socket there and a Unix socket's path holds 107 bytes (a job directory can be
deep). ``clear`` removes what must not outlive a job -- its processes, its temp (what a
killed task left there: Ansible's module payloads on a local host), its data -- at every
end: the supervisor's, the collector's, a release. A job is live while
``<jobs>/<id>.lock`` is flock'ed: the supervisor takes it before the directory exists and
holds it (its worker too) until it has removed ``data/``; the kernel drops it when they
die. ansible-runner's ``worker cleanup`` judges liveness by a pid file and deletes live
jobs while keeping dead ones; here the garbage collector deletes only what it could lock,
so never a live job.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gpuboot import paths
from gpuboot.errors import BadInput
from gpuboot.executor import procs

# A dead job's spool waits this long for its controller to re-attach and release it.
KEEP_S = 24 * 3600
TEMP_PREFIX = "gpuboot-job-"


def jobs_root(explicit: str | None = None) -> Path:
    root = explicit or os.environ.get("GPUBOOT_EXECUTOR_JOBS") or str(paths.home() / "executor")
    return paths.private_dir(Path(root))


@dataclass(frozen=True)
class Job:
    root: Path
    job_id: str

    @property
    def dir(self) -> Path:
        return self.root / self.job_id

    @property
    def lock_path(self) -> Path:
        return self.root / f"{self.job_id}.lock"

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def spool(self) -> Path:
        return self.dir / "stream"

    @property
    def meta(self) -> Path:
        return self.dir / "meta.json"


def _lock(path: Path, *, wait: bool) -> int | None:
    """An fd holding the flock on ``path`` (created if missing), or None when it is held.
    The fd is checked against the path again: a collector may have unlinked the file
    between our open and our lock, and a lock on an unlinked file protects nothing."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def record(job: Job, **fields: object) -> None:
    """``fields`` added to the job's ``meta.json``, written whole (a collector reading the
    meta of a job killed while writing it sees the previous one)."""
    paths.write_private(job.meta, json.dumps({**recorded(job), **fields}))


def recorded(job: Job) -> dict:
    try:
        doc = json.loads(job.meta.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def make_temp(job: Job, base: Path | None = None) -> Path:
    """The job's temp, 0700, in ``base`` (the executor's temp: $TMPDIR, else /tmp), named in
    its meta before it exists: however the job ends, its end finds it. The job's ``data/``
    exists first (``clear`` does nothing without it)."""
    base = Path(base or tempfile.gettempdir())
    while True:
        temp = base / f"{TEMP_PREFIX}{secrets.token_hex(4)}"
        record(job, temp=str(temp))
        try:
            temp.mkdir(mode=0o700)
        except FileExistsError:  # not ours: another name
            continue
        return temp


def clear(job: Job) -> None:
    """End what a job left that must not outlive it: its processes (all that name its data
    directory: what a supervisor and guard killed outright leave), its temp, then its data
    (the transmitted secrets). ``data/`` goes last: while it exists, the job's end is not
    done. Only for a job that is not live (its lock held by the caller, or the caller its
    supervisor with every process of the job ended)."""
    if not job.data.exists():
        return
    procs.end_marked(str(job.data))
    temp = recorded(job).get("temp")
    if isinstance(temp, str) and Path(temp).name.startswith(TEMP_PREFIX):  # nothing else
        shutil.rmtree(temp, ignore_errors=True)
    shutil.rmtree(job.data, ignore_errors=True)


def claim(job: Job) -> int:
    """Make a new job live: its lock held (the fd returned), then its directory."""
    fd = _lock(job.lock_path, wait=True)
    assert fd is not None  # a waiting lock is always taken
    try:
        job.dir.mkdir(mode=0o700)
    except FileExistsError:
        os.close(fd)
        raise BadInput(
            f"job {job.job_id} already exists on this executor",
            where=str(job.dir),
            hint="give every shard a new job id",
        ) from None
    return fd


def is_live(job: Job) -> bool:
    if not job.lock_path.exists():
        return False
    fd = _lock(job.lock_path, wait=False)
    if fd is None:
        return True
    os.close(fd)
    return False


def release(job: Job) -> bool:
    """Remove a finished job whose stream the controller has read; False when it is live."""
    fd = _lock(job.lock_path, wait=False)
    if fd is None:
        return False
    try:
        clear(job)
        shutil.rmtree(job.dir, ignore_errors=True)
        job.lock_path.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True


def collect_garbage(root: Path, keep_s: float = KEEP_S) -> list[str]:
    """Dead jobs: ``clear``ed at once (a supervisor killed outright leaves its secrets and
    its temp; its guard ends the job's processes unless it was killed too), the rest
    removed once its spool is ``keep_s`` old. The job ids removed whole."""
    removed = []
    ids = {p.name.removesuffix(".lock") for p in root.iterdir() if not p.name.startswith(".")}
    for job_id in sorted(ids):
        job = Job(root, job_id)
        fd = _lock(job.lock_path, wait=False)
        if fd is None:
            continue  # live
        try:
            clear(job)  # its end not yet cleaned up when the supervisor was killed
            with contextlib.suppress(FileNotFoundError):
                if time.time() - job.spool.stat().st_mtime < keep_s:
                    continue
            shutil.rmtree(job.dir, ignore_errors=True)
            job.lock_path.unlink(missing_ok=True)
            removed.append(job_id)
        finally:
            os.close(fd)
    return removed
