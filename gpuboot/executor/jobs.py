"""The executor's job directories, and which of them are live.

``<jobs>/<id>/`` holds a job: ``data/`` (the worker's private data dir: the transmitted
inventory, variables and keys), ``stream`` (the worker's stream, spooled), ``meta.json``
and ``worker.err``. A job is live while ``<jobs>/<id>.lock`` is flock'ed: the supervisor
takes it before the directory exists and holds it (its worker too) until it has removed
``data/``; the kernel drops it when they die. ansible-runner's ``worker cleanup`` judges
liveness by a pid file and deletes live jobs while keeping dead ones; here the garbage
collector deletes only what it could lock, so never a live job.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from gpuboot import paths
from gpuboot.errors import BadInput
from gpuboot.executor import procs

# A dead job's spool waits this long for its controller to re-attach and release it.
KEEP_S = 24 * 3600


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
        shutil.rmtree(job.dir, ignore_errors=True)
        job.lock_path.unlink(missing_ok=True)
    finally:
        os.close(fd)
    return True


def collect_garbage(root: Path, keep_s: float = KEEP_S) -> list[str]:
    """Dead jobs: what they left running ended and their ``data/`` removed at once (a
    supervisor killed outright leaves its secrets; its guard ends the job's processes unless
    it was killed too), the rest once its spool is ``keep_s`` old. The job ids removed
    whole."""
    removed = []
    ids = {p.name.removesuffix(".lock") for p in root.iterdir() if not p.name.startswith(".")}
    for job_id in sorted(ids):
        job = Job(root, job_id)
        fd = _lock(job.lock_path, wait=False)
        if fd is None:
            continue  # live
        try:
            if job.data.exists():  # its end not yet cleaned up: the supervisor was killed
                procs.end_marked(str(job.data))
                shutil.rmtree(job.data, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                if time.time() - job.spool.stat().st_mtime < keep_s:
                    continue
            shutil.rmtree(job.dir, ignore_errors=True)
            job.lock_path.unlink(missing_ok=True)
            removed.append(job_id)
        finally:
            os.close(fd)
    return removed
