"""One command on a node through testinfra, with a deadline kept by the controller.

A node may hold a session forever: a tool stuck in the kernel (D state) outlives the
node's own `timeout`, and a hostile node may simply never answer. testinfra's ssh backend
waits without a limit and keeps no handle on its ssh process, so the deadline is kept
here: past it, the local shell and ssh client started for the call are found by a token
in their command line and killed, which ends the call.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from typing import Any

from gpuboot.errors import GpubootError

KILL_GRACE_S = 10  # for the killed ssh's pipes to close and testinfra to return


class RemoteTimeout(GpubootError):
    """The node held the session past its deadline: its ssh was ended (ERROR)."""


def run_with_deadline(host: Any, command: str, seconds: float, what: str) -> Any:
    """``host.run(command)``, cut off after ``seconds`` (RemoteTimeout names ``what``)."""
    token = f"gpuboot-remote-{uuid.uuid4().hex}"
    done: dict[str, Any] = {}

    def call() -> None:
        try:
            done["out"] = host.run(f": {token}\n{command}")
        except BaseException as exc:  # handed to the caller's thread
            done["exc"] = exc

    worker = threading.Thread(target=call, name=token, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        _kill_processes_with(token)
        worker.join(KILL_GRACE_S)
        raise RemoteTimeout(
            f"{what} timed out after {seconds:.0f}s (the node held the session: a tool "
            "stuck in the kernel, or no answer); its ssh was ended"
        )
    if "exc" in done:
        raise done["exc"]
    return done["out"]


def _kill_processes_with(token: str) -> None:
    me = str(os.getpid())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() not in f.read() or pid == me:
                    continue
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue  # gone meanwhile
