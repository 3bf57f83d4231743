"""A shard's journal on the controller: what arrived from the worker, as it arrived.

One JSON line per unit that matters (status, job event, rc, end of stream, the
supervisor's trailer), each with the stream offset just past it, flushed before the next
unit is read: a controller that dies or a shard that is lost keeps every event that
arrived, and a re-attach starts at the last offset. An event is recorded once (by its
uuid), whatever a re-attach sends again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

# The keys of a status line the controller keeps: the first one also carries the worker's
# command, cwd and whole environment, which stay on the executor.
STATUS_KEYS = ("status", "runner_ident", "job_explanation", "result_traceback")


@dataclass
class Replay:
    offset: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    status: str | None = None  # the last status the worker sent
    explanation: str | None = None
    rc: int | None = None
    eof: bool = False
    trailer: dict[str, Any] | None = None


class Journal:
    def __init__(self, path: Path):
        self.path = path
        self.replay = Replay()
        self._seen: set[str] = set()
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:  # a line the controller was writing when it died
                    continue
                self._apply(record)
        self._out: IO[str] | None = None

    def _apply(self, record: dict[str, Any]) -> None:
        kind, data = record.get("k"), record.get("d")
        replay = self.replay
        replay.offset = max(replay.offset, int(record.get("o", 0)))
        if kind == "event":
            self._seen.add(str(data.get("uuid")))
            replay.events.append(data)
        elif kind == "status":
            replay.status = data.get("status")
            replay.explanation = data.get("job_explanation") or replay.explanation
        elif kind == "rc":
            replay.rc = data
        elif kind == "eof":
            replay.eof = True
        elif kind == "trailer":
            replay.trailer = data

    def _write(self, kind: str, data: Any, offset: int) -> None:
        if self._out is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path.touch(mode=0o600)
            self._out = self.path.open("a", encoding="utf-8")
        record = {"k": kind, "o": offset, "d": data}
        self._out.write(json.dumps(record) + "\n")
        self._out.flush()
        self._apply(record)

    def status(self, line: dict[str, Any], offset: int) -> None:
        self._write("status", {k: line[k] for k in STATUS_KEYS if k in line}, offset)

    def event(self, event: dict[str, Any], offset: int) -> bool:
        """Record a job event; False when it was recorded before."""
        if str(event.get("uuid")) in self._seen:
            return False
        self._write("event", event, offset)
        return True

    def rc(self, rc: int | None, offset: int) -> None:
        self._write("rc", rc, offset)

    def eof(self, offset: int) -> None:
        self._write("eof", True, offset)

    def trailer(self, data: dict[str, Any], offset: int) -> None:
        self._write("trailer", data, offset)

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
