"""A shim's fast path: hand the call to the node's warm emulator (emu.serve) and wait.

A shim stands in for a native binary, but each one is a Python interpreter importing the
emulator (~30 ms of CPU on a lab node, ~10 of them the bare interpreter); certify's
collection runs ~18 of them per node, on the cores the controller uses. Here the shim only
passes its argv, environment, umask, working directory and stdin/stdout/stderr to the
warm emulator, which runs the same code in a forked child and sends the exit code back.

Imports only what a bare interpreter has loaded already, plus _socket and marshal.
Whatever goes wrong before the warm emulator accepts the call (none running, stale code,
a closed fd, another uid) returns None: the shim then runs the tool itself, as before.
"""

from __future__ import annotations

import os
import sys

# Read-only queries (and the small state changes of nvidia-smi/mlnx_qos, which take the
# same lock either way). Never the probes or daemons: they are found by their process
# names and pids, run for long and must die with their caller (`timeout`).
SERVED = frozenset(
    {"nvidia-smi", "lsmod", "modinfo", "dmesg", "lspci", "ibstat", "ibstatus", "ibv_devinfo"}
    | {"mlnx_qos"}
)
SOCKET = "/run/gpuemu/serve.sock"
MAX_REQUEST = 1 << 20  # argv + environment


def socket_path() -> str:
    return os.environ.get("GPUEMU_ROOT", "").rstrip("/") + SOCKET


def call(argv: list[str]) -> int | None:
    """The exit code of ``argv`` as the warm emulator ran it, or None: run it here."""
    if os.path.basename(argv[0]) not in SERVED:
        return None
    import _socket  # what `socket` wraps, without its enum-heavy import

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(socket_path())
        except OSError:
            if not os.environ.get("GPUEMU_ROOT") and os.geteuid() == 0:
                spawn()  # a node: start one for the next calls
            return None
        return _ask(sock, argv, _socket)
    except OSError:
        return None
    finally:
        sock.close()


def _ask(sock, argv: list[str], _socket) -> int | None:
    import marshal

    umask = os.umask(0o022)
    os.umask(umask)
    try:
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        cwd = -1  # a deleted or unreadable working directory: the child keeps its own
    fds = [0, 1, 2] + ([cwd] if cwd >= 0 else [])
    data = marshal.dumps((list(argv), dict(os.environ), umask))
    if len(data) > MAX_REQUEST:
        return None
    rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    try:
        frame = len(data).to_bytes(4, "little") + data
        sent = sock.sendmsg([frame], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        while sent < len(frame):
            sent += sock.send(frame[sent:])
    finally:
        if cwd >= 0:
            os.close(cwd)
    if sock.recv(1) != b"y":
        return None  # refused (stale code, another uid) or gone: nothing ran
    rc = b""
    while len(rc) < 4:
        chunk = sock.recv(4 - len(rc))
        if not chunk:
            name = os.path.basename(argv[0])
            sys.stderr.write(f"{name}: gpuemu: the warm emulator lost this call\n")
            return 70
        rc += chunk
    return int.from_bytes(rc, "little", signed=True)


def spawn() -> None:
    """Start the warm emulator in its own session, holding none of this process's files
    (the collection script's probe lock is an inherited fd), and never wait for it."""
    gpuemu = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpuemu")
    try:
        inherited = [int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2]
    except OSError:
        inherited = []
    actions = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in inherited]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "GPUEMU_ROOT")}
    try:  # noqa: SIM105 - contextlib is an import this fast path does without
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", gpuemu, "serve"],
            env,
            file_actions=actions,
            setsid=True,
        )
    except OSError:
        pass  # the tool still runs here
