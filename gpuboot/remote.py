"""One command on a node through testinfra, with a deadline kept by the controller and its
answer read within a cap.

A node may hold a session forever: a tool stuck in the kernel (D state) outlives the
node's own `timeout`, and a hostile node may simply never answer. testinfra's ssh backend
waits without a limit and keeps no handle on its ssh process, so the deadline is kept
here: past it, the local shell and ssh client started for the call are found by a token
in their command line and killed, which ends the call.

testinfra also reads a command's whole answer into memory before anyone can look at its
size (``Popen.communicate``): a node answering 1 GB would cost the controller that much,
twice over once decoded. The answer is read here instead, chunk by chunk, and the local
process is killed as soon as it passes the cap the call was given.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import types
import uuid
from typing import Any

from gpuboot.bundle.model import MAX_NODE_BYTES
from gpuboot.errors import GpubootError

KILL_GRACE_S = 10  # for the killed ssh's pipes to close and testinfra to return
# The largest answer a node sends: the collection script's base64 of a node's files at their
# cap (gpuboot.collect: a gzipped tar, which incompressible output does not shrink), with
# room for the tar's headers.
MAX_ANSWER_BYTES = (MAX_NODE_BYTES + 64 * 1024) * 4 // 3 + 64 * 1024
STDERR_KEPT = 1024 * 1024  # ssh's and the shell's complaints: read for their last line
READ_CHUNK = 256 * 1024


class RemoteTimeout(GpubootError):
    """The node held the session past its deadline: its ssh was ended (ERROR)."""


class AnswerTooLarge(GpubootError):
    """The node answered more than the call's cap: its ssh was ended, nothing kept (ERROR)."""


def run_with_deadline(
    host: Any, command: str, seconds: float, what: str, *, max_bytes: int | None = None
) -> Any:
    """``host.run(command)``, cut off after ``seconds`` (RemoteTimeout names ``what``) or
    once its stdout passes ``max_bytes`` (default MAX_ANSWER_BYTES; AnswerTooLarge names
    the cap)."""
    limit = MAX_ANSWER_BYTES if max_bytes is None else max_bytes
    token = f"gpuboot-remote-{uuid.uuid4().hex}"
    done: dict[str, Any] = {}

    def call() -> None:
        try:
            done["out"] = run_capped(host, f": {token}\n{command}", limit, what)
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


# The cap of the calls running in this thread: communicate() reads it, so a backend's
# run_local needs no new argument to honour it.
_cap = threading.local()


def run_capped(host: Any, command: str, max_bytes: int, what: str) -> Any:
    """``host.run(command)`` with every answer read in this thread capped at ``max_bytes``."""
    from testinfra.backend.base import BaseBackend

    for backend in _answer_readers(host):
        # a backend with its own run_local reads through communicate() itself
        stock = isinstance(backend, BaseBackend) and "run_local" not in vars(backend)
        if stock and type(backend).run_local is BaseBackend.run_local:
            backend.run_local = types.MethodType(_run_local_capped, backend)
    _cap.limit, _cap.what = max_bytes, what
    try:
        return host.run(command)
    finally:
        _cap.limit = None


def communicate(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """``proc.communicate()``, within the cap this thread's call set (none set: unchanged).
    stdout over the cap kills ``proc`` and raises AnswerTooLarge; stderr past STDERR_KEPT
    is read and dropped."""
    limit = getattr(_cap, "limit", None)
    if limit is None:
        return proc.communicate()
    if proc.stdin:
        proc.stdin.close()
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        for pipe, buf in ((proc.stdout, out), (proc.stderr, err)):
            if pipe is not None:
                sel.register(pipe, selectors.EVENT_READ, buf)
        while sel.get_map():
            for key, _ in sel.select():
                chunk = os.read(key.fd, READ_CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data is err:
                    err += chunk[: max(0, STDERR_KEPT - len(err))]
                elif len(out) + len(chunk) > limit:
                    _end(proc)
                    raise AnswerTooLarge(
                        f"{_cap.what}: the node's answer passed the cap of {limit} bytes; "
                        "its ssh was ended and nothing of it was kept",
                        hint="inspect the node: gpuboot's collection never answers that much "
                        "(a hostile or broken shell, or a tool flooding its output)",
                    )
                else:
                    out += chunk
    proc.wait()
    return bytes(out), bytes(err)


def _end(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _run_local_capped(backend: Any, command: str, *args: str) -> Any:
    """testinfra's BaseBackend.run_local, its answer read by communicate()."""
    cmd = backend.encode(backend.quote(command, *args))
    proc = subprocess.Popen(
        cmd, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    stdout, stderr = communicate(proc)
    return backend.result(proc.returncode, cmd, stdout, stderr)


def _answer_readers(host: Any) -> list[Any]:
    """The testinfra backends whose run_local reads this host's answers: its own (ssh), and
    for Ansible's connections the local host that runs `ansible` (its JSON carries them)."""
    from testinfra.backend.ansible import AnsibleBackend
    from testinfra.utils import ansible_runner

    backend = getattr(host, "backend", None)  # None: not testinfra's (a test's fake node)
    if isinstance(backend, AnsibleBackend):
        return [backend, ansible_runner.local.backend]
    return [backend] if backend is not None else []
