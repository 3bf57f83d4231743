"""One mutating gpuboot run per machine at a time.

install converges nodes, certify needs idle GPUs for its probes and changes taints: two
such runs on one node at once corrupt each other's work. Each takes an exclusive
``flock`` on ``$GPUBOOT_HOME/locks/<machine>.lock`` for every host it selected, where the
machine is the address SSH reaches (``ansible_host`` and port): the same node under two
inventory names is one lock, two labs' ``node1`` are two. Locks are taken without
waiting; a run that finds one held is refused (bad input, exit 2) naming the holder's
run id, pid and start time, which the holder writes into the file. The kernel releases
a flock when its process ends, so a killed run never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuboot.inventory import Inventory

from gpuboot import paths
from gpuboot.errors import BadInput

# fd -> what this process wrote there; note_run() adds the run id once the run dir exists.
_HELD: dict[int, dict[str, Any]] = {}


def locks_dir() -> Path:
    return paths.private_dir(paths.home() / "locks")


def machine(name: str, hostvars: dict[str, Any]) -> str:
    """The machine an inventory host reaches: its address and SSH port."""
    address = str(hostvars.get("ansible_host") or name).strip().lower()
    return f"{address}:{hostvars.get('ansible_port') or 22}"


def _file_name(key: str) -> str:
    """A lock file name for any machine key: only [A-Za-z0-9_.-] kept, the rest %XX."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), key)
    return ("%2E" + safe[1:] if safe.startswith(".") else safe)[:200] + ".lock"


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return (
            f"gpuboot {info['verb']} (run {info.get('run_id') or 'starting'}, "
            f"pid {info['pid']}, since {info['started']})"
        )
    except (ValueError, KeyError, TypeError, OSError):
        return "another gpuboot run (it has not said which yet)"


def _write(fd: int, info: dict[str, Any]) -> None:
    data = json.dumps(info).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _release(fd: int) -> None:
    _HELD.pop(fd, None)
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)  # no stale holder shown to the next reader
    os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def hold(hosts: dict[str, str], verb: str) -> Iterator[None]:
    """Hold every machine of ``hosts`` (inventory host -> machine key) for this run, or
    refuse the run (BadInput) naming the host and who holds it. All or nothing."""
    where = locks_dir()
    info = {
        "verb": verb,
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hosts": sorted(hosts),
    }
    by_machine: dict[str, list[str]] = {}
    for host, key in hosts.items():
        by_machine.setdefault(key, []).append(host)
    taken: list[int] = []
    try:
        for key in sorted(by_machine):  # one order for everyone
            path = where / _file_name(key)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                raise paths.fs_error(exc, f"lock {path}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held by another run (EWOULDBLOCK)
                holder = _holder(fd)
                os.close(fd)
                raise BadInput(
                    f"{', '.join(by_machine[key])} is in use by {holder}",
                    where=str(path),
                    hint="wait for that run to end (or stop it), then run again; "
                    "a run on other hosts is not affected",
                ) from None
            taken.append(fd)
        for fd in taken:
            _write(fd, info)
            _HELD[fd] = info
        yield
    finally:
        for fd in taken:
            _release(fd)


def note_run(run_id: str) -> None:
    """Name this process's run in every lock it holds (called when its run dir is made)."""
    for fd, info in list(_HELD.items()):
        info["run_id"] = run_id
        with contextlib.suppress(OSError):
            _write(fd, info)


def hold_inventory(inv: Inventory, limit: str | None, verb: str):
    """Hold the machines of the hosts ``limit`` selects in ``inv`` (all without it)."""
    from gpuboot.inventory import select_hosts

    return hold_hosts(inv, select_hosts(inv, limit), verb)


def hold_hosts(inv: Inventory, hosts: list[str], verb: str):
    """Hold the machines of ``hosts``, hosts of ``inv``."""
    return hold({h: machine(h, inv.hosts[h]) for h in hosts}, verb)


@contextlib.contextmanager
def exclusive(fh: IO) -> Iterator[None]:
    """An exclusive flock on an open file for a read-then-write (waits for its turn)."""
    fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def exclusive_current(fh: IO, path: Path, reopen: Callable[[], IO]) -> Iterator[IO]:
    """:func:`exclusive` on the file ``path`` names once the lock is granted: a file that
    was replaced (renamed over, e.g. a compacted scan history) while this run waited is
    opened again with ``reopen`` and locked instead. Yields the locked file; one opened
    here is closed on the way out."""
    opened: IO | None = None
    try:
        while True:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                current = os.path.samestat(os.fstat(fh.fileno()), os.stat(path))
            except FileNotFoundError:
                current = False
            if current:
                break
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            if opened is not None:
                opened.close()
            fh = opened = reopen()
        try:
            yield fh
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    finally:
        if opened is not None:
            opened.close()
