"""The warm emulator: one interpreter with the emulator imported, answering the shims'
calls (emu.client) on a unix socket, each in a forked child.

The child runs the tool's own code with the caller's argv, environment, umask, working
directory and stdin/stdout/stderr, so it prints, exits and changes the node's state as
the shim would have; it reads the node's state afresh like any call. A real node runs
native tools and has nothing like this: it only spares the lab's nodes (which share the
controller's cores) an interpreter start and the emulator's imports per call.

Only root's calls are served (the socket is root's, and each caller's uid is checked); a
change to the emulator's source ends the server at the next call, which runs itself, and
the next one starts a fresh server. It ends after IDLE_S without a call.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import importlib
import marshal
import os
import signal
import socket
import struct
import sys
import traceback

from . import client, paths

IDLE_S = 600
LOCK = paths.RUN + "/serve.lock"
# Everything a served tool may import, lazily included: imported once, here
PRELOAD = (
    "main", "state", "model", "kmod", "kmsg", "kfiles", "kernel", "smi", "smi_fields",
    "smi_q", "smi_xml", "mig", "nvlink", "topo", "fabric", "faults", "xid", "lspci", "nic",
)  # fmt: skip
SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))


def _sources() -> tuple[tuple[str, int], ...]:
    """The emulator's code as of now (names and mtimes): a change ends the server."""
    gpuemu = os.path.join(os.path.dirname(SOURCE_DIR), "gpuemu")
    names = sorted(n for n in os.listdir(SOURCE_DIR) if n.endswith(".py"))
    files = [gpuemu] + [os.path.join(SOURCE_DIR, n) for n in names]
    return tuple((f, os.stat(f).st_mtime_ns) for f in files)


def main(argv: list[str]) -> int:
    if argv:
        sys.stderr.write("usage: gpuemu serve\n")
        return 2
    os.closerange(3, 1 << 16)  # nothing of the caller's (the probe lock above all)
    os.chdir("/")  # nor its working directory (the collection script's, removed after)
    lock_path, sock_path = paths.p(LOCK), client.socket_path()
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    lock = open(lock_path, "a+")  # noqa: SIM115 - held for the server's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # one is running or starting
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # who serves, for a look (or a test) to find it
    lock.flush()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # its socket goes with it
    for name in PRELOAD:
        importlib.import_module(f"emu.{name}")
    code = _sources()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{sock_path}.{os.getpid()}"
    old = os.umask(0o077)  # the socket: root's only
    try:
        listener.bind(tmp)
    finally:
        os.umask(old)
    listener.listen(64)
    os.replace(tmp, sock_path)  # callers never meet a socket not yet listening
    mine = os.stat(sock_path).st_ino
    listener.settimeout(IDLE_S)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                return 0
            conn.settimeout(5)  # a caller sends its request at once, or is not served
            if _sources() != code:
                conn.close()  # the caller runs the tool itself; the next call starts anew
                return 0
            _handle(conn, listener)
    finally:
        try:
            if os.stat(sock_path).st_ino == mine:  # not a newer server's
                os.unlink(sock_path)
        except OSError:
            pass
        listener.close()


def _handle(conn: socket.socket, listener: socket.socket) -> None:
    fds: list[int] = []
    try:
        request, fds = _receive(conn)
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        if request is None or uid != os.geteuid() or len(fds) < 3:
            return
        argv, env, umask = request
        if os.path.basename(argv[0]) not in client.SERVED:
            return
        if os.fork() == 0:
            _child(conn, listener, argv, env, umask, fds)
    except OSError:
        return
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def _receive(conn: socket.socket) -> tuple[tuple | None, list[int]]:
    """(argv, environment, umask) and the caller's fds (stdin, stdout, stderr, cwd)."""
    rights = array.array("i")
    head, ancdata, _flags, _addr = conn.recvmsg(4, socket.CMSG_SPACE(4 * rights.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            rights.frombytes(data[: len(data) - len(data) % rights.itemsize])
    fds = list(rights)
    if len(head) != 4:
        return None, fds
    length = int.from_bytes(head, "little")
    if length > client.MAX_REQUEST:
        return None, fds
    data = b""
    while len(data) < length:
        chunk = conn.recv(length - len(data))
        if not chunk:
            return None, fds
        data += chunk
    try:
        argv, env, umask = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None, fds
    ok = (
        isinstance(argv, list)
        and argv
        and all(isinstance(a, str) for a in argv)
        and isinstance(env, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        and isinstance(umask, int)
    )
    return ((argv, env, umask) if ok else None), fds


def _child(
    conn: socket.socket,
    listener: socket.socket,
    argv: list[str],
    env: dict[str, str],
    umask: int,
    fds: list[int],
) -> None:
    """Become the caller's tool: its fds, cwd, umask and environment, then its exit code."""
    rc = 1
    try:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        if len(fds) > 3:
            os.fchdir(fds[3])
        for fd in fds:
            os.close(fd)
        os.umask(umask)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = list(argv)
        conn.settimeout(None)
        conn.sendall(b"y")
        rc = _run(argv)
    except BaseException:  # as an interpreter would: the traceback, exit 1
        traceback.print_exc()
        rc = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    try:
        conn.sendall(rc.to_bytes(4, "little", signed=True))
    finally:
        os._exit(0)


def _run(argv: list[str]) -> int:
    from .main import main

    try:
        return int(main(argv))
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        sys.stderr.write(f"{exc.code}\n")
        return 1
