"""A TCP throughput probe between two nodes, in plain python3 (every node has it; lab
nodes reach only the lab repository, so iperf3 is not an option there).

The receiver counts the bytes a sender pushes for a few seconds and both print one line:
``gpuboot-tcpbw role=<server|client> bytes=<n> seconds=<s> gbits_s=<g>``; the receiver's
figure is the measurement (what arrived, not what was queued).
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass

from gpuboot.errors import ParseError

PORT = 18516

# Runs on the node: `python3 -c <this> server PORT` / `python3 -c <this> client HOST PORT SECS`.
_PROGRAM = r"""
import socket, sys, time
role = sys.argv[1]
def report(n, t):
    g = n * 8 / t / 1e9 if t else 0
    print("gpuboot-tcpbw role=%s bytes=%d seconds=%.3f gbits_s=%.3f" % (role, n, t, g))
if role == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    for _ in range(50):  # a previous run's receiver may still hold the port briefly
        try:
            s.bind(("0.0.0.0", int(sys.argv[2]))); break
        except OSError:
            time.sleep(0.2)
    s.listen(1); s.settimeout(45)
    c, _ = s.accept(); n = 0; t0 = None
    while True:
        b = c.recv(1 << 20)
        if t0 is None: t0 = time.monotonic()
        if not b: break
        n += len(b)
    report(n, time.monotonic() - (t0 or time.monotonic()))
else:
    host, port, secs = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    end = time.monotonic() + 30  # the server starts over its own SSH session
    while True:
        try:
            c = socket.create_connection((host, port), timeout=10); break
        except OSError:
            if time.monotonic() > end: raise
            time.sleep(0.1)
    buf = b"\0" * (1 << 20); n = 0; t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        c.sendall(buf); n += len(buf)
    c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
    report(n, time.monotonic() - t0)
"""

_LINE = re.compile(r"gpuboot-tcpbw role=(\w+) bytes=(\d+) seconds=([\d.]+) gbits_s=([\d.]+)")


def _prog() -> str:
    code = base64.b64encode(_PROGRAM.encode()).decode()
    return f'python3 -c "$(echo {code} | base64 -d)"'


def server_command(port: int = PORT, limit: int = 60) -> str:
    return f"timeout {limit} {_prog()} server {port}"


def client_command(peer: str, seconds: float, port: int = PORT, limit: int = 60) -> str:
    return f"timeout {limit} {_prog()} client {shlex.quote(peer)} {port} {seconds:g}"


@dataclass(frozen=True)
class TcpBw:
    role: str
    bytes: int
    seconds: float
    gbits_s: float


def parse_tcpbw(text: str) -> TcpBw:
    m = _LINE.search(text)
    if not m:
        raise ParseError("gpuboot-tcpbw", "no result line", hint="did the peer connect?")
    return TcpBw(m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4)))
