"""Ending every process a job started, wherever it went.

ansible-runner starts ansible-playbook under a pty in a session of its own, and each of
Ansible's workers takes yet another: killing the worker's process group misses them, and
a worker killed outright leaves ansible-playbook running as an orphan. The supervisor and
the worker's guard are made child subreapers, so an orphan of their tree becomes their
child instead of init's, and their descendants are found in /proc by parent pid and ended
by pid and process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def term_with_parent() -> None:
    """SIGTERM to this process when the thread that started it dies (the worker's guard:
    its supervisor killed outright, nothing else left to end the job's tree). The caller
    checks its parent afterwards: one that died before this call sends nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _stat(pid: str) -> tuple[int, int, str] | None:
    """(ppid, pgid, state) of a process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after "pid (comm)", whatever comm holds
    return int(fields[1]), int(fields[2]), fields[0]


def descendants(root: int) -> dict[int, int]:
    """Living (not zombie) descendants of ``root``: pid -> process group."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _stat(entry)) is not None:
            table[int(entry)] = info
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, int] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if table[pid][2] != "Z":
            found[pid] = table[pid][1]
        todo += children.get(pid, [])
    return found


def reap() -> None:
    """Collect exited children (the subreaper's adopted orphans among them)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def end_tree(root: int, grace_s: float = 5.0) -> list[int]:
    """SIGKILL every descendant of ``root`` and its process group until none is left;
    the pids ended."""
    ended: list[int] = []
    deadline = time.monotonic() + grace_s
    while (found := descendants(root)) and time.monotonic() < deadline:
        for pid, pgid in found.items():
            if pid not in ended:
                ended.append(pid)
            if pgid not in (os.getpgid(0), 0):
                with contextlib.suppress(OSError):
                    os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
        reap()
    return ended


def stop_child(child: subprocess.Popen) -> int:
    """SIGKILL a direct child if it still runs, and take its exit status: before end_tree,
    whose reaping would otherwise take it and leave Popen reading exit 0."""
    if child.poll() is None:
        child.kill()
    return child.wait()


def _marked(marker: bytes) -> list[int]:
    """Processes whose command line names ``marker`` (a job's own data directory) or a
    path under it: the whole path, never a longer name that starts with it."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/cmdline", "rb") as fh:
                line = fh.read()
                if marker + b"/" in line or marker + b"\0" in line:
                    found.append(int(entry))
    return found


def end_marked(marker: str) -> list[int]:
    """End what a dead job left running: every process whose command line names its data
    directory (ansible-playbook and Ansible's forks of it: each names the job's inventory),
    their process groups and their descendants: what is left when the supervisor and the
    worker's guard were both killed outright. The pids ended."""
    ended: list[int] = []
    for pid in _marked(marker.encode()):
        info = _stat(str(pid))
        if info is None:
            continue
        ended += [p for p in end_tree(pid) if p not in ended]
        with contextlib.suppress(OSError):
            if info[1] not in (os.getpgid(0), 0):
                os.killpg(info[1], signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        if pid not in ended:
            ended.append(pid)
    return ended
