"""The executor's side of a shard (``gpuboot-executor-worker``, ``python -m
gpuboot.executor.supervisor``): ``ansible-runner worker`` supervised.

``run`` starts the worker under its guard (``guard``: a supervisor killed outright
takes the job's processes with it) in a session of its own with an environment reduced to an
allow-list (the worker sends its whole environment back in its first status line and in
its artifacts), spools its stream to ``<job>/stream`` and forwards the spool to stdout
without ever blocking on it: when the controller goes away the job goes on into the spool
(``--on-detach finish``) or is cancelled (``--on-detach cancel``), and ``attach`` sends
the spool again from any offset. SIGTERM or SIGINT (or ``cancel``) asks the worker to
cancel, which returns its artifacts; whatever of the job is still running after the grace
period, or after the worker ended however it ended, is killed by pid and process group.
The play is not transmitted: the job names one of the executor's own shipped playbooks
(gpuboot runs here at the controller's version), and the supervisor sets gpuboot's Ansible
settings with this executor's paths before the worker reads the job.
The worker's temp (TMPDIR, and Ansible's local temp) is the job's own short directory in
the executor's temp. The job's data directory (the transmitted inventory, variables and
keys) and its temp are removed at every end (``jobs.clear``); the spool waits for
``release`` or the collector. The supervisor's last line on the stream, after the
worker's, says how the worker ended.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from gpuboot import paths
from gpuboot.errors import BadInput, GpubootError
from gpuboot.executor import jobs, procs
from gpuboot.executor.stream import JOB_ID, ON_DETACH
from gpuboot.executor.versions import local_versions
from gpuboot.executor.wire import TRAILER_KEY

# What the worker (and ansible-playbook under it) may see of the supervisor's environment;
# the job's own variables come in the stream.
ENV_ALLOWED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME", "TMPDIR")
_CHUNK = 64 * 1024
# A controller that takes no bytes for this long has gone: the rest stays in the spool.
FORWARD_STALL_S = 30.0
KWARGS_MAX = 1 << 20  # the transmit's first line: runner's arguments, a few KB
PLAYBOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\.ya?ml")


def scrubbed_env(environ: dict[str, str]) -> dict[str, str]:
    env = {k: environ[k] for k in ENV_ALLOWED if k in environ}
    venv_bin = str(Path(sys.executable).parent)  # ansible-playbook beside our interpreter
    path = env.get("PATH", "/usr/bin:/bin")
    env["PATH"] = path if venv_bin in path.split(os.pathsep) else f"{venv_bin}{os.pathsep}{path}"
    return env


class _Forward:
    """The spool, sent to stdout as far as the controller takes it, never blocking."""

    def __init__(self, spool: Path, on_detach: str, cancel: threading.Event):
        self._fd = os.open(spool, os.O_RDONLY | os.O_CLOEXEC)
        self.sent = 0
        self.attached = True
        self._on_detach = on_detach
        self._cancel = cancel
        os.set_blocking(1, False)

    def want(self, spooled: int) -> bool:
        return self.attached and self.sent < spooled

    def send(self, spooled: int) -> None:
        data = os.pread(self._fd, min(_CHUNK, spooled - self.sent), self.sent)
        try:
            self.sent += os.write(1, data)
        except BlockingIOError:
            pass
        except OSError:  # the controller went away
            self.attached = False
            if self._on_detach == "cancel":
                self._cancel.set()


def _read_first_line() -> tuple[bytes, bytes]:
    """The transmit's first line (its kwargs) from stdin, and what was read past it."""
    data = b""
    while b"\n" not in data and len(data) <= KWARGS_MAX:
        chunk = os.read(0, _CHUNK)
        if not chunk:
            break
        data += chunk
    line, newline, rest = data.partition(b"\n")
    if not newline or len(line) > KWARGS_MAX:
        raise BadInput("the transmitted job does not start with its kwargs line", where="stdin")
    return line, rest


def job_kwargs(line: bytes, job: jobs.Job, playbooks: Path, temp: Path | None = None) -> bytes:
    """The transmit's kwargs line as this executor runs it: the playbook a bare name of
    one of ITS shipped playbooks (the play is not transmitted; gpuboot runs here at the
    controller's version), gpuboot's own Ansible settings with paths on this executor,
    Ansible's local temp the job's ``temp``."""
    from gpuboot.runner import ansible_env, config_env

    try:
        doc = json.loads(line)
        kwargs = doc["kwargs"]
        name = kwargs["playbook"]
    except (ValueError, KeyError, TypeError):
        raise BadInput("the transmitted kwargs are not a job", where="stdin") from None
    playbook = playbooks / str(name)
    if not PLAYBOOK_NAME.fullmatch(str(name)) or not playbook.is_file():
        raise BadInput(
            f"playbook {name!r} is not one of this executor's shipped playbooks",
            where=str(playbooks),
            hint="name a playbook of gpuboot/ansible/playbooks (the same gpuboot version)",
        )
    strategy = str((kwargs.pop("gpuboot", None) or {}).get("strategy", "linear"))
    run_dir = paths.private_dir(job.dir / "run")
    # the ssh masters' sockets in the job's short temp where its directory is too deep
    short = temp / "cp" if temp is not None else None
    env = {**ansible_env(run_dir, strategy, short), **config_env(run_dir)}
    kwargs["playbook"] = str(playbook)
    kwargs["envvars"] = {**(kwargs.get("envvars") or {}), **env}
    if temp is not None:  # what a killed worker leaves there goes with the job
        kwargs["envvars"]["ANSIBLE_LOCAL_TEMP"] = str(temp)
    return json.dumps(doc).encode()


def _pump_stdin(pipe: IO[bytes], first: bytes) -> None:
    """The transmitted job into the worker (it reads up to the stream's own end)."""
    try:
        pipe.write(first)
        pipe.flush()
        while chunk := os.read(0, _CHUNK):
            pipe.write(chunk)
            pipe.flush()
    except (OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            pipe.close()


def _start_worker(
    job: jobs.Job, keepalive_s: str, lock_fd: int, grace_s: float, temp: Path
) -> tuple[subprocess.Popen, int | None]:
    """The worker under its guard (guard.py: what the job started ends with the supervisor,
    however it dies), in a session of its own, ``temp`` its TMPDIR; the guard and the
    worker's pid."""
    pid_read, pid_write = os.pipe()
    try:
        with (job.dir / "worker.err").open("wb") as err:
            guard = subprocess.Popen(
                [
                    *(sys.executable, "-m", "gpuboot.executor.guard", "--parent", str(os.getpid())),
                    *("--pid-fd", str(pid_write), "--grace-seconds", str(grace_s), "--"),
                    *(sys.executable, "-m", "ansible_runner", "worker"),
                    *("--private-data-dir", str(job.data), "--keepalive-seconds", keepalive_s),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env={**scrubbed_env(dict(os.environ)), "TMPDIR": str(temp)},
                start_new_session=True,
                pass_fds=(lock_fd, pid_write),  # the job stays live while its worker lives
            )
    finally:
        os.close(pid_write)
    with os.fdopen(pid_read, "rb") as said:  # closed once the worker started, or the guard died
        pid = said.read(32).strip()
    return guard, int(pid) if pid.isdigit() else None


def serve(
    job: jobs.Job,
    keepalive_s: str,
    on_detach: str,
    grace_s: float,
    lock_fd: int,
    playbooks: Path,
) -> None:
    line, rest = _read_first_line()
    job.data.mkdir(mode=0o700)  # first: jobs.clear ends a job that has one
    temp = jobs.make_temp(job)
    first = job_kwargs(line, job, playbooks, temp) + b"\n" + rest  # refused before any worker
    procs.become_subreaper()
    cancel = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: cancel.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed session is a detach, not an end
    # the guard's pipes, signals and exit status are the worker's
    worker, worker_pid = _start_worker(job, keepalive_s, lock_fd, grace_s, temp)
    jobs.record(
        job,
        supervisor_pid=os.getpid(),
        guard_pid=worker.pid,
        worker_pid=worker_pid,
        started=time.time(),
    )
    threading.Thread(target=_pump_stdin, args=(worker.stdin, first), daemon=True).start()
    out = worker.stdout.fileno()
    ended: list[int] = []
    with job.spool.open("ab") as spool:
        forward = _Forward(job.spool, on_detach, cancel)
        spooled, asked_at, closed = 0, None, False
        while not closed:
            if cancel.is_set() and asked_at is None:
                asked_at = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    worker.send_signal(signal.SIGTERM)  # runner cancels, returns artifacts
            if asked_at is not None and time.monotonic() - asked_at > grace_s and not ended:
                procs.stop_child(worker)  # its status kept, not reaped by end_tree
                ended = procs.end_tree(os.getpid())
            writable = [1] if forward.want(spooled) else []
            ready, can_write, _ = select.select([out], writable, [], 0.2)
            if ready:
                chunk = os.read(out, _CHUNK)
                closed = not chunk
                spool.write(chunk)
                spool.flush()
                spooled += len(chunk)
            if can_write:
                forward.send(spooled)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(grace_s)
        procs.stop_child(worker)
        ended += procs.end_tree(os.getpid())  # ansible-playbook and its workers, orphaned
        jobs.clear(job)
        trailer = {
            "worker_exit": worker.returncode,
            "canceled": cancel.is_set(),
            "detached": not forward.attached,
            "ended_pids": ended,
        }
        line = json.dumps({TRAILER_KEY: trailer}).encode() + b"\n"
        spool.write(line)
        spool.flush()
        spooled += len(line)
    jobs.record(job, ended=time.time(), **trailer)
    stalled_since = time.monotonic()
    while forward.want(spooled) and time.monotonic() - stalled_since < FORWARD_STALL_S:
        sent = forward.sent
        if select.select([], [1], [], 0.5)[1]:
            forward.send(spooled)
        if forward.sent != sent:
            stalled_since = time.monotonic()


def attach(job: jobs.Job, offset: int) -> int:
    """The spool from ``offset`` to its end, following it while the job is live."""
    if not job.spool.exists():
        print(f"no stream for job {job.job_id} on this executor", file=sys.stderr)
        return 1
    with job.spool.open("rb") as spool:
        spool.seek(offset)
        while True:
            live = jobs.is_live(job)
            chunk = spool.read(_CHUNK)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
            elif not live:
                return 0
            else:
                time.sleep(0.1)


def cancel(job: jobs.Job) -> int:
    if not jobs.is_live(job):
        print(f"job {job.job_id} is not running", file=sys.stderr)
        return 1
    try:
        pid = int(json.loads(job.meta.read_text())["supervisor_pid"])
        with open(f"/proc/{pid}/cmdline", "rb") as fh:  # that pid is this job's supervisor
            ours = job.job_id.encode() in fh.read().split(b"\0")
    except (OSError, ValueError, KeyError):  # starting (no pid yet) or just gone
        ours = False
    if not ours:
        print(f"job {job.job_id}: no supervisor to cancel yet, try again", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuboot-executor-worker", description=__doc__)
    parser.add_argument(
        "--jobs-dir", help="default: $GPUBOOT_EXECUTOR_JOBS, else $GPUBOOT_HOME/executor"
    )
    parser.add_argument(
        "--playbooks-dir",
        type=Path,
        default=paths.PLAYBOOKS_DIR,
        help="where a job's playbook name is looked up (default: gpuboot's shipped playbooks)",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)

    def job_verb(name: str, text: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=text)
        sub.add_argument("--job-id", required=True)
        return sub

    run = job_verb("run", "run the job transmitted on stdin, its stream on stdout")
    run.add_argument("--keepalive-seconds", type=int, default=5)
    run.add_argument("--on-detach", choices=ON_DETACH, default="finish")
    run.add_argument("--grace-seconds", type=float, default=10.0)
    job_verb("attach", "send a job's spooled stream from an offset").add_argument(
        "--offset", type=int, default=0
    )
    job_verb("cancel", "cancel a running job")
    job_verb("release", "remove a finished job whose stream was read")
    verbs.add_parser("gc", help="remove dead jobs").add_argument(
        "--keep-seconds", type=float, default=jobs.KEEP_S
    )
    verbs.add_parser(
        "versions",
        help="ansible-core, ansible-runner and gpuboot, and gpuboot's source digest, as JSON",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.verb == "versions":
        print(json.dumps(local_versions()))
        return 0
    if getattr(args, "job_id", None) is not None and not JOB_ID.fullmatch(args.job_id):
        print(f"--job-id {args.job_id!r}: only [A-Za-z0-9_-], at most 64", file=sys.stderr)
        return 2
    try:
        root = jobs.jobs_root(args.jobs_dir)
        if args.verb == "gc":
            print(json.dumps({"removed": jobs.collect_garbage(root, args.keep_seconds)}))
            return 0
        job = jobs.Job(root, args.job_id)
        if args.verb == "attach":
            return attach(job, args.offset)
        if args.verb == "cancel":
            return cancel(job)
        if args.verb == "release":
            return 0 if jobs.release(job) else 1
        jobs.collect_garbage(root)
        lock_fd = jobs.claim(job)
        try:
            serve(
                job,
                str(args.keepalive_seconds),
                args.on_detach,
                args.grace_seconds,
                lock_fd,
                args.playbooks_dir,
            )
        finally:  # however serve ended (a full disk, a bug): no process, secret or temp left
            procs.end_tree(os.getpid())
            jobs.clear(job)
        return 0
    except GpubootError as exc:
        print(f"gpuboot-executor-worker: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
