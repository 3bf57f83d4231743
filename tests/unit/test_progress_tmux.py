"""`gpuboot install` progress on a real terminal: the recorded 10- and 20-node installs
(tests/fixtures/runner) replayed through the real command in a tmux pane of 8 rows (fewer
than the hosts: a per-host display cannot fit), captured many times while it runs.

Every capture shows the status line as the pane's last line; once done, the pane and its
whole history hold only the lines meant to stay (batch starts, the failed and the
unreachable host, the final status): no redraw ever scrolled a row away."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.fixtures.runner import replay_install as replay
from tests.paths import REPO

RUNNER = REPO / "tests" / "fixtures" / "runner"

ROWS, COLUMNS = 8, 100
REPLAY_S = 8.0  # a recording (5 to 25 minutes), replayed in about this long
STATUS = re.compile(r"^install: (batch \d+/\d+, )?\d+/\d+ hosts done")

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (make setup)"),
]


def _tmux(sock: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-S", sock, *args], capture_output=True, text=True, check=True, timeout=20
    ).stdout


@pytest.mark.parametrize("name", sorted(replay.RECORDINGS))
def test_terminal_progress_stays_within_the_pane(name, tmp_path):
    rec = replay.RECORDINGS[name]
    events = replay.load(rec.path)
    speed = (replay.created(events[-1]) - replay.created(events[0])) / REPLAY_S
    sock = str(tmp_path / "tmux.sock")  # a server of its own, gone with tmp_path
    command = (
        f"{sys.executable} {RUNNER / 'replay_install.py'} {rec.path} {tmp_path} "
        f"{speed:.1f} > {tmp_path / 'stdout'}; echo REPLAY-DONE; sleep 120"
    )
    _tmux(sock, "-f", "/dev/null", "new-session", "-d", "-s", "p", "-x", str(COLUMNS),
          "-y", str(ROWS), command)  # fmt: skip
    try:
        _tmux(sock, "set-option", "-t", "p", "history-limit", "10000")
        captures = []
        deadline = time.monotonic() + 20 * REPLAY_S
        while time.monotonic() < deadline:
            screen = _tmux(sock, "capture-pane", "-p", "-t", "p").splitlines()
            if any("REPLAY-DONE" in line for line in screen):
                break
            captures.append(screen)
            time.sleep(0.05)
        whole = _tmux(sock, "capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", "p")
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], check=False, timeout=20)
    shown = [c for c in captures if any(line.strip() for line in c)]
    assert len(shown) > 20  # captured at many points of the run
    assert all(len(screen) <= ROWS for screen in shown)
    lasts = [[line for line in screen if line.strip()][-1] for screen in shown]
    # the status line, always in view (a capture may fall between an event line's
    # newline and the status row written after it: at most a stray one or two)
    missed = [screen for screen, last in zip(shown, lasts, strict=True) if not STATUS.match(last)]
    assert len(missed) <= 2, missed
    assert all(len(last) < COLUMNS for last in lasts)  # one row: it never wraps
    lines = [line for line in whole.splitlines() if line.strip()]
    assert lines[-1] == "REPLAY-DONE"
    kept = lines[:-1]
    assert [line for line in kept if STATUS.match(line)] == [kept[-1]]  # only the final one
    done = f"batch {rec.batches}/{rec.batches}, {rec.hosts}/{rec.hosts} hosts done"
    assert kept[-1].startswith(f"install: {done}: {rec.final}")
    events_kept = kept[:-1]
    assert len(events_kept) == rec.batches + 2, events_kept  # batch starts, the 2 hosts
    assert any(line.startswith(rec.failed) for line in events_kept)
    assert any(line.startswith(f"{rec.unreachable} UNREACHABLE at") for line in events_kept)
