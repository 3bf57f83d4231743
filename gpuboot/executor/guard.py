"""The worker's parent on the executor (``python -m gpuboot.executor.guard``): what a job
started ends with it, even when its supervisor is killed outright.

A supervisor killed by SIGKILL (an operator, the OOM killer) ends nothing. The guard sits
between it and ``ansible-runner worker``: the kernel sends it SIGTERM when the supervisor
dies (the parent-death signal), and as a child subreaper it inherits every orphan of the
job's tree (ansible-playbook and Ansible's forks run in sessions of their own, out of
reach of a process group). On SIGTERM -- the supervisor's cancel, or its death -- it
passes SIGTERM to the worker (which cancels), waits for it at most the grace period, ends
whatever is left under it and exits. When the worker ends on its own the guard exits as
the worker did (its code, or the same signal), so the supervisor reports the worker's end.
The worker has the guard's stdin, stdout and inherited descriptors (the job's lock); the
guard keeps no copy of the pipes, so their end is the worker's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time

from gpuboot.executor import procs

WATCHED = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}


def _start(argv: list[str], pid_fd: int) -> subprocess.Popen:
    os.set_inheritable(pid_fd, False)  # the supervisor reads it to its end: the guard's alone
    worker = subprocess.Popen(
        argv,
        close_fds=False,  # what the supervisor passed the guard is the worker's (the lock)
        preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED),
    )
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd, inheritable=False)
    os.close(devnull)
    os.write(pid_fd, f"{worker.pid}\n".encode())
    os.close(pid_fd)
    return worker


def _watch(worker: subprocess.Popen, grace_s: float) -> bool:
    """Wait for the worker's end, or for SIGTERM and then at most ``grace_s``; True when the
    guard was told to end (the job's tree is then ended)."""
    deadline = None
    while worker.poll() is None:
        if deadline is None:
            got = signal.sigwaitinfo(WATCHED).si_signo
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            info = signal.sigtimedwait(WATCHED, left)
            got = info.si_signo if info else None
        if got in (signal.SIGTERM, signal.SIGINT) and deadline is None:
            os.kill(worker.pid, signal.SIGTERM)  # not yet reaped: the pid is still the worker's
            deadline = time.monotonic() + grace_s
    return deadline is not None


def _exit_as(returncode: int) -> int:
    """Exit as the worker did: its code, or killed by the same signal."""
    if returncode >= 0:
        return returncode
    with contextlib.suppress(OSError):  # SIGKILL and SIGSTOP take no handler
        signal.signal(-returncode, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {-returncode})
    os.kill(os.getpid(), -returncode)
    return 128 - returncode  # a signal whose default is not to end a process


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuboot.executor.guard")
    parser.add_argument("--parent", type=int, required=True, help="the supervisor's pid")
    parser.add_argument("--pid-fd", type=int, required=True, help="the worker's pid goes here")
    parser.add_argument("--grace-seconds", type=float, default=10.0)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker's argv")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)  # taken by sigwaitinfo, one at a time
    procs.term_with_parent()
    if os.getppid() != args.parent:  # the supervisor died before the signal was set
        return 128 + signal.SIGTERM
    procs.become_subreaper()
    worker = _start(command, args.pid_fd)
    if _watch(worker, args.grace_seconds):
        procs.stop_child(worker)
        procs.end_tree(os.getpid())
    return _exit_as(worker.wait())


if __name__ == "__main__":
    sys.exit(main())
