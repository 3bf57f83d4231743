"""One ssh connection per executor for a whole verb.

A verb reaches each executor several times: its pre-flight (versions), its job, the job's
release. Each ssh connection costs the controller a key exchange (OpenSSH 9.2's default,
the post-quantum sntrup761x25519, about 0.1 s of CPU), so a verb run from the CLI shares
one master per executor (ControlMaster=auto: the first connection becomes it) through a
private directory of its own, made at the first executor command, and ends the masters on
every way out. A master left by a controller killed outright ends ControlPersist seconds
after its last session; its directory, named after the verb's pid, goes at a later verb's
first executor command. Library callers outside `shared_connections()` connect once per
command, as before.

An operator's own ControlPath (ansible_ssh_args) comes first on ssh's command line and
wins: ssh takes the first value of an option.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuboot import paths
from gpuboot.errors import GpubootError
from gpuboot.sshopts import SSH_CONTROL_PATH_MAX

PERSIST_S = 60
# A ControlPath ssh would expand (%) or split (blanks) gets no master, as one longer
# than SSH_CONTROL_PATH_MAX does.
PLAIN_PATH = re.compile(r"[A-Za-z0-9/._-]+")


class _Verb:
    """The directory of one verb's masters, made when an executor is first reached
    (pre-flight threads ask at once), or None where it could not be."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made = False
        self.dir: Path | None = None

    def directory(self) -> Path | None:
        with self._lock:
            if not self._made:
                self._made = True
                try:
                    base = paths.private_dir(paths.home() / "ssh")
                    _sweep(base)
                    self.dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))
                except (GpubootError, OSError):  # each command connects on its own
                    self.dir = None
            return self.dir


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def _sweep(base: Path) -> None:
    """Remove what verbs killed outright left: a directory whose verb is gone and whose
    masters have ended (a socket in it is a master still persisting: left for later)."""
    for verb_dir in base.iterdir():
        pid = verb_dir.name.split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if any(stat.S_ISSOCK(p.lstat().st_mode) for p in verb_dir.iterdir()):
                continue
            shutil.rmtree(verb_dir)
        except OSError:
            continue


_verb: _Verb | None = None


@contextmanager
def shared_connections() -> Iterator[None]:
    """Executor commands run inside share one master per executor; a nested use shares
    the outer one's."""
    global _verb
    if _verb is not None:
        yield
        return
    _verb = verb = _Verb()
    try:
        yield
    finally:
        _verb = None
        if verb.dir is not None:
            from gpuboot.runner import close_ssh_masters  # only a verb that made masters

            close_ssh_masters(verb.dir)
            shutil.rmtree(verb.dir, ignore_errors=True)


def options(executor: str) -> tuple[str, ...]:
    """ssh options that put ``executor``'s commands on its verb's master (none outside
    shared_connections, or where no socket could be bound)."""
    where = _verb.directory() if _verb is not None else None
    if where is None:
        return ()
    # named after the executor: short, and the same socket for each of its commands
    sock = str(where / hashlib.sha256(executor.encode()).hexdigest()[:12])
    if len(os.fsencode(sock)) > SSH_CONTROL_PATH_MAX or not PLAIN_PATH.fullmatch(sock):
        return ()
    return (
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPersist={PERSIST_S}",
        "-o",
        f"ControlPath={sock}",
    )
