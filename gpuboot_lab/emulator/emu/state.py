"""Node state on disk: the profile, persistent state (/var/lib) and volatile state (/run).

Writers hold an exclusive flock for the whole read-modify-write and replace files by
rename, so readers never see a half-written file and concurrent shims do not lose
updates.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import paths


class EmuError(Exception):
    """A back-door (ctl) usage or setup error; shims print their own real-tool messages."""


def read_json(path: str, default: Any) -> Any:
    try:
        with open(paths.p(path), encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return default


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    real = paths.p(path)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    import tempfile  # here: every shim imports this module, few of them write

    fd, tmp = tempfile.mkstemp(prefix=".tmp.", dir=os.path.dirname(real))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json(path: str, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(paths.p(path))


def new_vstate() -> dict[str, Any]:
    """Volatile state of a freshly booted node (everything /run loses on reboot)."""
    return {
        "boot_time": time.time(),
        "booted": False,
        "modules": {},  # name -> {version, flavor, deps, size, seq}
        "module_seq": 0,
        "persistence": {},  # "bus_id" -> True
        "persistenced_pid": None,
        "fabricmanager_pid": None,
        "faults": [],
        "mig": {},  # "bus_id" -> {"gis": [...], "next_gi": n}
        "qos": {},  # netdev -> {"trust": ..., "pfc": [...]}
        "xid_seen": [],  # bus ids that already printed the "GPU at PCI" preamble
        "reset_needed": [],
    }


def new_pstate() -> dict[str, Any]:
    return {"gpus": {}, "faults": [], "mig_mode": {}, "fault_seq": 0, "boot_count": 0}


@dataclass
class Node:
    """A consistent snapshot of everything the shims need."""

    profile: dict[str, Any]
    pstate: dict[str, Any] = field(default_factory=new_pstate)
    vstate: dict[str, Any] = field(default_factory=new_vstate)

    @property
    def faults(self) -> list[dict[str, Any]]:
        return list(self.pstate.get("faults", [])) + list(self.vstate.get("faults", []))


def load_profile() -> dict[str, Any]:
    prof = read_json(paths.PROFILE, None)
    if prof is None:
        raise EmuError(f"no profile at {paths.PROFILE} (the lab writes it at 'lab up')")
    return prof


def load() -> Node:
    """Read-only snapshot (no lock: files are only ever replaced whole)."""
    pstate = read_json(paths.PSTATE, None) or new_pstate()
    vstate = read_json(paths.VSTATE, None) or new_vstate()
    return Node(load_profile(), pstate, vstate)


@contextlib.contextmanager
def locked() -> Iterator[None]:
    lock = paths.p(paths.LOCK)
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def transaction() -> Iterator[Node]:
    """Lock, load, let the caller mutate, then save both state files and derived files."""
    with locked():
        node = load()
        before = json.dumps([node.pstate, node.vstate], sort_keys=True)
        yield node
        if json.dumps([node.pstate, node.vstate], sort_keys=True) != before:
            write_json(paths.PSTATE, node.pstate)
            write_json(paths.VSTATE, node.vstate)
        # Imported here: kernel files depend on the model, which depends on this module.
        from . import kfiles

        kfiles.sync(node)
