"""Live progress on stderr: one status line, plus a line only for a host that needs a look.

On a terminal the status line is one row redrawn in place (``\\r``, erase line: a redraw
never scrolls, never outgrows the screen, whatever the fleet's size) and the few event
lines (a host failed, became unreachable, runs far slower than the others) are written
above it. Anywhere else (a CI log, a file) every line is timestamped and the status line
is written at most once per STATUS_EVERY_S: a 300-node run stays a few lines per host,
whatever its number of tasks. ``verbose`` adds the per-task stream (one line per host
per task that ran). Progress goes to stderr only: --json output never sees it.

install feeds :class:`InstallProgress` ansible-runner's job events (gpuboot.runner);
certify and scan feed :class:`RunProgress` the engine's phases (collection, pair probes,
judging), through the same ``progress`` callable that carries their messages.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from gpuboot.report._util import host_key
from gpuboot.ui import clip, printable

STATUS_EVERY_S = 10.0  # not a terminal: at most one status line per this many seconds
REDRAW_EVERY_S = 0.2  # a terminal: at most this many redraws of the status line per second
TICK_S = 1.0  # the clock ticks (elapsed, ETA, slow hosts) even when no event arrives
# A host is "far slower than its batch" when it still runs a task the others finished,
# longer than SLOW_FACTOR times their median and at least SLOW_MIN_S.
SLOW_FACTOR = 3.0
SLOW_MIN_S = 30.0
# A failure is reported once the host did not go on (a rescue block, ignore_errors) for
# this long, or the play ended: a rescued failure is no failure of the host.
RESCUE_WAIT_S = 5.0

ERASE = "\r\x1b[2K"  # to the row's start, erase the row


def duration(seconds: float) -> str:
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def sort_hosts(hosts) -> list[str]:
    """Natural order (node2 before node10): the one ordering every progress line uses."""
    return sorted(hosts, key=host_key)


class Screen:
    """Where progress goes: a terminal (one status row redrawn in place, event lines above
    it) or a plain stream (timestamped lines, the status line at a bounded rate)."""

    def __init__(
        self,
        stream: IO[str],
        *,
        tty: bool | None = None,
        clock: Callable[[], float] | None = None,
        columns: int | None = None,
    ):
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.clock = clock or (lambda: time.time())  # looked up per call: a replay sets it
        self.columns = columns
        self.text = ""  # the status line as it stands
        self.shown = False  # a status row is on the screen (terminal)
        self.last: float | None = None  # when the status line was last written
        self.lock = threading.RLock()

    def _width(self) -> int:
        if self.columns:
            return self.columns
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 80

    def _out(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _row(self) -> str:
        # one row less than the width: a full row would wrap the cursor onto the next
        return ERASE + clip(self.text, self._width() - 1) if self.text else ERASE

    def line(self, text: str) -> None:
        """A line that stays (scrolls with the log)."""
        text = printable(text, one_line=True)
        with self.lock:
            if self.tty:
                self._out(ERASE + text + "\n" + (self._row() if self.shown else ""))
            else:
                self._out(f"{stamp(self.clock())} {text}\n")

    def status(self, text: str, *, force: bool = False) -> None:
        """The status line: redrawn (terminal) or written (elsewhere) when it is due."""
        text = printable(text, one_line=True)
        with self.lock:
            self.text = text
            now = self.clock()
            every = REDRAW_EVERY_S if self.tty else STATUS_EVERY_S
            if not force and self.last is not None and now - self.last < every:
                return
            self.last = now
            if self.tty:
                self._out(self._row())
                self.shown = True
            else:
                self._out(f"{stamp(now)} {text}\n")

    def close(self, text: str) -> None:
        """The last status line, left on the screen (or in the log)."""
        with self.lock:
            self.shown = False
            if self.tty:
                self._out(ERASE + printable(text, one_line=True) + "\n")
            else:
                self._out(f"{stamp(self.clock())} {printable(text, one_line=True)}\n")


@contextmanager
def ticking(progress: Any, every: float = TICK_S) -> Iterator[None]:
    """Call ``progress.tick()`` every ``every`` seconds while the block runs, so elapsed
    time, ETA and slow hosts move on during a long task that sends no event."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            progress.tick()

    thread = threading.Thread(target=loop, name="gpuboot-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2)


def _eta(elapsed: float, done: float, total: float) -> str:
    if done <= 0 or done >= total:
        return "ETA -" if done < total else "ETA 0s"
    return f"ETA {duration(elapsed / done * (total - done))}"


def _slow_line(host: str, what: str, ran: float, others: list[float]) -> str | None:
    typical = statistics.median(others)
    if ran >= max(SLOW_MIN_S, SLOW_FACTOR * typical):
        took = duration(typical)
        return f"{host} is slow: {what} running for {duration(ran)}; the others took {took}"
    return None


# ---------------------------------------------------------------- install
RESULTS = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped")


class InstallProgress:
    """install's progress from ansible-runner job events, batch by batch.

    The status line: batch k/n, hosts done/total, ok/changed/failed/unreachable hosts,
    elapsed, ETA (from the batches done), and the last task that ran on a host (never a
    skipped one: ansible announces a task before it decides to skip it)."""

    def __init__(self, screen: Screen, *, verbose: bool = False, label: str = "install"):
        self.screen = screen
        self.clock = screen.clock
        self.verbose = verbose
        self.label = label
        self.started = self.clock()
        self.total = 0
        self.batch_no = self.batch_of = 0
        self.batch_hosts: list[str] = []
        self.batch_started = self.started
        self.batch_times: list[float] = []  # seconds each finished batch took
        self.final: dict[str, str] = {}  # host -> ok/changed/failed/unreachable, once known
        self.running: dict[str, tuple[str, str, float]] = {}  # host -> (task id, task, since)
        self.took: dict[str, dict[str, float]] = {}  # task id -> host -> seconds
        self.task = ""  # the last task that ran (not skipped) on some host
        self.failing: dict[str, tuple[str, str, float]] = {}  # host -> (task, reason, when)
        self.slow: set[str] = set()  # hosts reported slow in this batch
        self.results: dict[str, Any] = {}  # host -> HostResult of this batch
        # task results of the batch's play so far (not skipped ones): the status moves
        # with every task, not only when a host's play ends
        self.task_results = 0
        self.task_changed = 0

    # -- hooks install calls
    def batch(self, number: int, of: int, hosts: list[str], total: int) -> None:
        with self.screen.lock:
            self._end_batch()
            self.batch_no, self.batch_of, self.total = number, of, total
            self.batch_hosts = list(hosts)
            self.batch_started = self.clock()
            self.slow.clear()
            self.running.clear()
            self.took.clear()
            self.task_results = self.task_changed = 0
            if of > 1:
                first, last = self.batch_hosts[0], self.batch_hosts[-1]
                span = first if first == last else f"{first} .. {last}"
                self.screen.line(f"{self.label}: batch {number}/{of}: {len(hosts)} host(s), {span}")
            self._status(force=True)

    def event(self, event: dict[str, Any], hosts: dict[str, Any]) -> None:
        """One job event, after gpuboot.runner folded it into ``hosts`` (this batch's)."""
        with self.screen.lock:
            self.results = hosts
            kind = event.get("event", "")
            data = event.get("event_data") or {}
            host, task = data.get("host"), str(data.get("task") or "")
            now = self.clock()
            if kind == "runner_on_start" and host:
                self.failing.pop(host, None)  # it goes on: a rescue block took the failure
                self.running[host] = (str(data.get("task_uuid") or task), task, now)
            elif kind in RESULTS and host:
                self._result(kind, host, task, data, now)
            elif kind == "playbook_on_stats":
                self._report_failures(now, every=True)
                self._end_batch()
            self._report_failures(now)
            self._check_slow(now)
            self._status()

    def tick(self) -> None:
        with self.screen.lock:
            if not self.batch_of:  # no play yet: nothing to show
                return
            now = self.clock()
            self._report_failures(now)
            self._check_slow(now)
            self._status()

    def close(self, *, interrupted: bool = False) -> None:
        """The last status line. ``interrupted``: the play was stopped (Ctrl-C, SIGTERM)
        before its end: a host of the open batch without a failure is interrupted, not ok
        (what it did so far is no converge)."""
        with self.screen.lock:
            if not self.batch_of:  # refused before any host: nothing to close
                return
            self._report_failures(self.clock(), every=True)
            if interrupted:
                for host in self.batch_hosts:
                    self.final.setdefault(host, "interrupted")
            self._end_batch()
            self.screen.close(self._text(final=True))

    # -- internals
    def _result(self, kind: str, host: str, task: str, data: dict, now: float) -> None:
        task_id, _, since = self.running.pop(host, ("", "", now))
        if task_id:
            self.took.setdefault(task_id, {})[host] = now - since
        res = data.get("res") or {}
        if kind != "runner_on_skipped":
            self.task = task
            self.task_results += 1
            self.task_changed += bool(res.get("changed"))
        if kind == "runner_on_unreachable":
            self.final[host] = "unreachable"
            reason = self._reason(host, res)
            self.screen.line(f"{host} UNREACHABLE at {task}: {reason}")
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.failing[host] = (task, self._reason(host, res), now)
        if self.verbose and kind != "runner_on_skipped":
            self.screen.line(f"{host} {self._verdict(kind, data)}: {task}")

    @staticmethod
    def _verdict(kind: str, data: dict) -> str:
        if kind == "runner_on_failed":
            return "failed (ignored)" if data.get("ignore_errors") else "FAILED"
        if kind == "runner_on_unreachable":
            return "UNREACHABLE"
        return "changed" if (data.get("res") or {}).get("changed") else "ok"

    def _reason(self, host: str, res: dict) -> str:
        result = self.results.get(host)
        if result is not None and result.reason:
            return result.reason
        from gpuboot.runner import _reason

        return _reason(res)

    def _report_failures(self, now: float, every: bool = False) -> None:
        for host, (task, reason, when) in list(self.failing.items()):
            if every or now - when >= RESCUE_WAIT_S:
                del self.failing[host]
                self.final[host] = "failed"
                self.screen.line(f"{host} FAILED at {task}: {reason}")

    def _check_slow(self, now: float) -> None:
        for host, (task_id, task, since) in list(self.running.items()):
            others = [t for h, t in self.took.get(task_id, {}).items() if h != host]
            if host in self.slow or not others:
                continue
            if line := _slow_line(host, task, now - since, others):
                self.slow.add(host)
                self.screen.line(line)

    def _end_batch(self) -> None:
        """The batch's play ended: every host of it has its final state."""
        if not self.batch_hosts:
            return
        for host in self.batch_hosts:
            if self.final.get(host) == "interrupted":
                continue
            result = self.results.get(host)  # folded with the play's final stats
            if result is not None:
                self.final[host] = "failed" if result.status == "pending" else result.status
            else:  # the play never reached it (install counts it failed)
                self.final.setdefault(host, "failed")
        self.batch_times.append(self.clock() - self.batch_started)
        self.batch_hosts, self.results = [], {}
        self.running.clear()

    def _counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("ok", "changed", "failed", "unreachable"), 0)
        for status in self.final.values():
            counts[status] = counts.get(status, 0) + 1
        return counts

    def _text(self, final: bool = False) -> str:
        now = self.clock()
        counts = self._counts()
        done = len(self.final) - counts.get("interrupted", 0)
        elapsed = now - self.started
        head = f"{self.label}: "
        if self.batch_of > 1:
            head += f"batch {self.batch_no}/{self.batch_of}, "
        running = sum(1 for h in self.batch_hosts if h not in self.final)
        tasks = ""
        if running and not final and self.task_results:
            tasks = f" ({self.task_results} task results, {self.task_changed} changed)"
        text = (
            f"{head}{done}/{self.total} hosts done"
            + (f", {running} running{tasks}: " if running and not final else ": ")
            + ", ".join(f"{n} {k}" for k, n in counts.items())
            + f" | {duration(elapsed)}"
        )
        if final:
            return text
        finished = len(self.batch_times)
        if finished and self.batch_of:
            per_batch = sum(self.batch_times) / finished
            left = per_batch * (self.batch_of - finished) - (now - self.batch_started)
            text += f", ETA {duration(left)}"
        else:
            text += ", ETA -"
        if self.task:
            text += f" | last task: {self.task}"
        return text

    def _status(self, force: bool = False) -> None:
        self.screen.status(self._text(), force=force)


# ---------------------------------------------------------------- certify and scan
class RunProgress:
    """certify's and scan's progress: the messages they send (``progress(msg)``) and their
    phases over hosts (collecting evidence, pair probes, judging)."""

    def __init__(self, screen: Screen, *, label: str = "certify"):
        self.screen = screen
        self.clock = screen.clock
        self.label = label
        self.started = self.clock()
        self.phase_name = ""
        self.hosts: list[str] = []
        self.phase_started = self.started
        self.since: dict[str, float] = {}  # host -> when its part of the phase started
        self.took: dict[str, float] = {}  # host -> seconds its part took
        self.problems: dict[str, str] = {}
        self.slow: set[str] = set()

    def __call__(self, message: str) -> None:
        self.screen.line(f"gpuboot: {message}")

    def phase(self, name: str, hosts: list[str] | None = None) -> None:
        with self.screen.lock:
            if self.hosts:  # how the phase before ended, whatever the rate
                self.screen.status(self._text(final=True), force=True)
            self.phase_name, self.hosts = name, sort_hosts(hosts or [])
            self.phase_started = self.clock()
            self.since, self.took, self.slow = {}, {}, set()
            self.screen.status(self._text(), force=True)

    def started_host(self, host: str) -> None:
        with self.screen.lock:
            self.since[host] = self.clock()

    def finished_host(self, host: str, problem: str | None = None) -> None:
        with self.screen.lock:
            now = self.clock()
            self.took[host] = now - self.since.pop(host, now)
            if problem and host not in self.problems:
                self.problems[host] = problem
                self.screen.line(f"{host} {problem}")
            self._check_slow(now)
            self.screen.status(self._text())

    def tick(self) -> None:
        with self.screen.lock:
            if not self.phase_name:  # no phase yet: nothing to show
                return
            self._check_slow(self.clock())
            self.screen.status(self._text())

    def close(self) -> None:
        with self.screen.lock:
            if self.phase_name:
                self.screen.close(self._text(final=True))

    def _check_slow(self, now: float) -> None:
        others = list(self.took.values())
        for host, since in self.since.items():
            if host in self.slow or not others:
                continue
            if line := _slow_line(host, self.phase_name, now - since, others):
                self.slow.add(host)
                self.screen.line(line)

    def _text(self, final: bool = False) -> str:
        now = self.clock()
        done, total = len(self.took), len(self.hosts)
        text = f"{self.label}: {self.phase_name}"
        if total:
            text += f": {done}/{total} hosts done"
            if self.problems:
                text += f", {len(self.problems)} not judged"
        text += f" | {duration(now - self.started)}"
        if total and not final:
            text += ", " + _eta(now - self.phase_started, done, total)
        return text


class _NoPhases:
    """The phase hooks of a progress that is a plain function: nothing to show."""

    def phase(self, name: str, hosts: list[str] | None = None) -> None:
        pass

    def started_host(self, host: str) -> None:
        pass

    def finished_host(self, host: str, problem: str | None = None) -> None:
        pass


def phases(progress: Any) -> RunProgress | _NoPhases:
    """The phase hooks of certify's ``progress``: its own when it is a RunProgress."""
    return progress if isinstance(progress, RunProgress) else _NoPhases()


# ---------------------------------------------------------------- what the CLI opens
@contextmanager
def live_install(
    stream: IO[str], *, quiet: bool = False, verbose: bool = False
) -> Iterator[InstallProgress | None]:
    """install's progress on ``stream`` while the block runs (None with ``quiet``)."""
    if quiet:
        yield None
        return
    progress = InstallProgress(Screen(stream), verbose=verbose)
    try:
        with ticking(progress):
            yield progress
    except KeyboardInterrupt:
        progress.close(interrupted=True)
        raise
    except BaseException:
        progress.close()
        raise
    progress.close()


@contextmanager
def live_run(
    stream: IO[str], label: str, *, quiet: bool = False
) -> Iterator[Callable[[str], None]]:
    """certify's or scan's ``progress`` on ``stream`` while the block runs."""
    if quiet:
        yield lambda _m: None
        return
    progress = RunProgress(Screen(stream), label=label)
    try:
        with ticking(progress):
            yield progress
    finally:
        progress.close()
