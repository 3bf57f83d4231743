"""How the emulated NVIDIA daemons run: fork like the real ones (systemd Type=forking with a
PID file) or stay in the foreground (Type=simple); register in the volatile state while
alive; undo what they did on SIGTERM/SIGINT."""

from __future__ import annotations

import os
import select
import signal
import sys
import syslog
import time
from collections.abc import Callable
from types import FrameType

from . import state
from .state import Node


class Logger:
    """stderr in the foreground; syslog (the journal) once detached, as the real daemons."""

    def __init__(self, tool: str):
        self.tool = tool
        self.detached = False

    def __call__(self, text: str) -> None:
        if self.detached:
            syslog.openlog(self.tool, syslog.LOG_PID, syslog.LOG_DAEMON)
            syslog.syslog(syslog.LOG_INFO, text)
        else:
            sys.stderr.write(f"{self.tool}[{os.getpid()}]: {text}\n")
            sys.stderr.flush()


def run(
    *,
    log: Logger,
    key: str,
    pidfile: str | None,
    foreground: bool,
    start: Callable[[Node], str | None],
    stop: Callable[[Node], None],
    started: str,
    stopped: str,
) -> int:
    """Start a daemon. `start` runs in the daemon under the state lock and returns an error
    text to abort; the forking parent exits only once the daemon is ready (or failed)."""
    ready_w = None
    if not foreground:
        ready_r, ready_w = os.pipe()
        if os.fork() > 0:
            os.close(ready_w)
            readable, _, _ = select.select([ready_r], [], [], 30)
            msg = os.read(ready_r, 4096).decode() if readable else "timed out"
            os.close(ready_r)
            if msg == "ok":
                return 0
            sys.stderr.write(f"{log.tool}: {msg or 'failed to start'}\n")
            return 1
        os.close(ready_r)
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        log.detached = True

    def ready(msg: str) -> None:
        if ready_w is not None:
            os.write(ready_w, msg.encode())
            os.close(ready_w)

    with state.transaction() as node:
        error = start(node)
        if error is None:
            node.vstate[key] = os.getpid()
    if error is not None:
        log(error)
        ready(error)
        return 1
    if pidfile:
        state.write_atomic(pidfile, f"{os.getpid()}\n")
    log(started)
    ready("ok")

    done = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal done
        done = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    while not done:
        time.sleep(0.2)
    with state.transaction() as node:
        stop(node)
        if node.vstate.get(key) == os.getpid():
            node.vstate[key] = None
    if pidfile:
        state.remove(pidfile)
    log(stopped)
    return 0
