"""Judging nodes in worker processes, each node within its own deadline.

A node's rules run in a forked worker (the evidence is inherited, not copied), so rules
that never return, or a worker that dies, cost that node its verdict and nothing else.
One worker per core (at most MAX_WORKERS) judges node after node: a fork per node cost a
scan more of the controller's CPU than the rules themselves (a large process's page
tables copied, then torn down). A worker past its node's deadline is ended, the node
reported late, and a new worker forked for the nodes left.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

from gpuboot.errors import GpubootError

T = TypeVar("T")
MAX_WORKERS = 8


class JudgingStopped(GpubootError):
    """A node's rules gave no verdict: past their deadline, or their worker died (ERROR)."""


@dataclass
class _Worker:
    process: Any
    conn: Connection

    def end(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


def _serve(jobs: Mapping[str, Callable[[], Any]], conn: Connection) -> None:
    """In a worker: judge each node named on ``conn``, answer with its report."""
    try:
        while True:
            name = conn.recv()
            try:
                conn.send(("ok", jobs[name]()))
            except Exception as exc:  # a bug in a rule: the controller reports it as before
                try:
                    conn.send(("error", exc))
                except Exception:  # an exception that cannot cross processes: its text can
                    conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
    except (EOFError, KeyboardInterrupt):  # the controller is done, or ends the run
        pass
    finally:
        conn.close()


def judge_within_deadlines(
    jobs: Mapping[str, Callable[[], T]],
    deadline_of: Callable[[str], float],
    late: Callable[[str, GpubootError], T],
    done: Callable[[str], None] = lambda _name: None,
    setting: str = "",
) -> dict[str, T]:
    """Each job's report. A job past its deadline (counted from when a worker took it) is
    ended and ``late`` gives its report, naming the deadline and the ``setting`` that
    changes it; a job whose worker dies without a report is reported the same way. A job
    that raises raises here."""
    ctx = multiprocessing.get_context("fork")
    size = max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS, len(jobs)))
    queue = deque(jobs)
    idle: list[_Worker] = []
    busy: dict[Connection, tuple[_Worker, str, float]] = {}  # -> (worker, job, ends)
    reports: dict[str, T] = {}

    def spawn() -> _Worker:
        ours, theirs = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(jobs, theirs), daemon=True)
        process.start()
        theirs.close()
        return _Worker(process, ours)

    def hand_out(name: str) -> None:
        worker = idle.pop() if idle else spawn()
        try:
            worker.conn.send(name)
        except OSError:  # it died while idle: the job goes to a new one
            worker.end()
            worker = spawn()
            worker.conn.send(name)
        busy[worker.conn] = (worker, name, time.monotonic() + deadline_of(name))

    def finish(name: str, report: T) -> None:
        reports[name] = report
        done(name)

    try:
        while queue or busy:
            while queue and len(busy) < size:
                hand_out(queue.popleft())
            soonest = min(ends for _w, _n, ends in busy.values())
            for conn in wait(list(busy), timeout=max(0.0, soonest - time.monotonic())):
                worker, name, _ends = busy.pop(conn)
                try:
                    kind, value = conn.recv()
                except EOFError:  # killed (out of memory?) before it answered
                    worker.end()
                    why = f"judging ended without a verdict: exit {worker.process.exitcode}"
                    finish(name, late(name, JudgingStopped(why)))
                    continue
                idle.append(worker)
                if kind == "error":
                    raise value
                finish(name, value)
            now = time.monotonic()
            for conn, (worker, name, ends) in list(busy.items()):
                if now >= ends:
                    worker.end()
                    del busy[conn]
                    seconds = deadline_of(name)
                    why = (
                        f"judging did not finish within {seconds:g}s (the controller's deadline"
                        f" for judging one node{', ' + setting if setting else ''}); its worker"
                        " was ended"
                    )
                    finish(name, late(name, JudgingStopped(why)))
    finally:  # done, an error or Ctrl-C: no worker outlives the run
        for worker in [*idle, *(w for w, _n, _e in busy.values())]:
            worker.end()
    return reports
