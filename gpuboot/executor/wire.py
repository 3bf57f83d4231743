"""Reading a worker's stream (ansible-runner's streaming protocol) with deadlines.

The stream is JSON lines (status, job events, keepalives, ``{"eof": true}``) and, before
the end, one ``{"zipfile": N}`` line followed by the artifacts: N bytes of zip in base64
with no line break. ansible-runner's own reader waits for ever on a silent connection and
takes a stream that stops half way for a finished one; this one raises ``Silence`` when no
byte comes within the heartbeat and ``Cut`` when the stream ends inside a unit or is not
the protocol. ``offset`` counts the bytes of the units read whole, so a reader attached
later can start exactly where this one stopped.
"""

from __future__ import annotations

import base64
import json
import math
import os
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# A job event carries a task's result; larger than this is not a line of the protocol.
LINE_MAX = 64 * 1024 * 1024
# The artifacts (status, rc, stdout, fact cache) of one shard, zipped.
ARTIFACTS_MAX = 512 * 1024 * 1024
# The supervisor's own last line, after the worker's stream (see supervisor.py).
TRAILER_KEY = "gpuboot_executor"
_CHUNK = 256 * 1024


class Silence(Exception):
    """No byte arrived within the deadline: the connection may be half open."""


class Cut(Exception):
    """The stream ended inside a unit, or is not ansible-runner's protocol."""


@dataclass(frozen=True)
class Unit:
    kind: str  # status | event | keepalive | artifacts | eof | trailer
    data: Any  # the decoded line (a dict), or the zip's bytes for artifacts


def _kind(line: dict[str, Any]) -> str:
    if TRAILER_KEY in line:
        return "trailer"
    if "status" in line:
        return "status"
    if "zipfile" in line:
        return "artifacts"
    if "eof" in line:
        return "eof"
    if line.get("event") == "keepalive":
        return "keepalive"
    return "event"


class WireReader:
    """Units from a file descriptor; ``first_byte_s`` bounds the wait for the first byte
    (connection and interpreter start-up), ``heartbeat_s`` every wait after it."""

    def __init__(self, fd: int, *, heartbeat_s: float, first_byte_s: float, offset: int = 0):
        self._fd = fd
        self._heartbeat_s = heartbeat_s
        self._wait_s = max(first_byte_s, heartbeat_s)
        self._buf = bytearray()
        self._closed = False
        self.offset = offset

    def _fill(self) -> None:
        deadline = time.monotonic() + self._wait_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Silence(f"no data for {self._wait_s:g} s")
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                break
        chunk = os.read(self._fd, _CHUNK)
        self._wait_s = self._heartbeat_s
        if chunk:
            self._buf += chunk
        else:
            self._closed = True

    def _line(self) -> bytes | None:
        """The next whole line, or None when the stream closed between lines."""
        start = 0
        while True:
            end = self._buf.find(b"\n", start)
            if end >= 0:
                line = bytes(self._buf[: end + 1])
                del self._buf[: end + 1]
                return line
            if len(self._buf) > LINE_MAX:
                raise Cut(f"a line longer than {LINE_MAX} bytes")
            if self._closed:
                if self._buf:
                    raise Cut(f"the stream ended inside a line ({len(self._buf)} bytes)")
                return None
            start = len(self._buf)
            self._fill()

    def _exactly(self, size: int) -> bytes:
        while len(self._buf) < size:
            if self._closed:
                raise Cut(f"the stream ended inside the artifacts ({len(self._buf)}/{size} bytes)")
            self._fill()
        data = bytes(self._buf[:size])
        del self._buf[:size]
        return data

    def units(self) -> Iterator[Unit]:
        """Every unit until the stream closes between units."""
        while (raw := self._line()) is not None:
            size = len(raw)
            try:
                line = json.loads(raw)
            except ValueError:
                raise Cut(f"not a line of the protocol: {raw[:80]!r}") from None
            if not isinstance(line, dict):
                raise Cut(f"not a line of the protocol: {raw[:80]!r}")
            kind = _kind(line)
            data: Any = line
            if kind == "artifacts":
                length = line["zipfile"]
                if not isinstance(length, int) or not 0 <= length <= ARTIFACTS_MAX:
                    raise Cut(f"artifacts of {length!r} bytes (at most {ARTIFACTS_MAX})")
                encoded = self._exactly(4 * math.ceil(length / 3))
                size += len(encoded)
                try:
                    data = base64.b64decode(encoded, validate=True)
                except ValueError:
                    raise Cut("the artifacts are not base64") from None
                if len(data) != length:
                    raise Cut(f"artifacts of {len(data)} bytes, {length} announced")
            self.offset += size
            yield Unit(kind, data)
