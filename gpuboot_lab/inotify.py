"""Will more lab nodes fit under the kernel's inotify limit? Asked before `lab up` starts any.

Every lab node boots systemd, and its systemd, dbus-daemon and systemd-logind each hold
inotify instances, charged to the user running podman (root: containers share the host's
user namespace). Past fs.inotify.max_user_instances a new node's systemd cannot start its
units, so its sshd never answers: `lab up` would wait 90 s and fail without saying why.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuboot.errors import BadInput

SYSCTL = "fs.inotify.max_user_instances"
ENOUGH = 1024  # what `make setup` raises the limit to (Makefile, $(STAMPS)/system)
# Measured (anon inotify fds under /proc per node, before, during and after a 20-node
# install; tests/fixtures/runner/README.md): systemd 4, dbus-daemon 1, systemd-logind 1.
# A gpg-agent left running in a node adds 2 later; what a new node needs to boot is 6.
PER_NODE = 6
INOTIFY_FD = "anon_inode:inotify"  # what an inotify instance's fd links to


def _effective_uid(status: str) -> int | None:
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[2])
    return None


def usage(proc: Path = Path("/proc"), uid: int | None = None) -> tuple[int, int]:
    """(the limit, the inotify instances ``uid``'s processes hold now) as /proc says.

    ``uid`` defaults to ours: the kernel charges an instance to its creator's user, and
    /proc shows a rootless container's root as that user.
    An instance shared by a fork's two fds counts twice: an estimate on the safe side.
    """
    uid = os.geteuid() if uid is None else uid
    limit = int((proc / "sys" / SYSCTL.replace(".", "/")).read_text())
    held = 0
    for pid in proc.iterdir():
        if not pid.name.isdigit():
            continue
        try:  # a process may end while it is read
            if _effective_uid((pid / "status").read_text()) != uid:
                continue
            held += sum(1 for fd in (pid / "fd").iterdir() if str(fd.readlink()) == INOTIFY_FD)
        except OSError:
            continue
    return limit, held


def require_room(nodes: int, proc: Path = Path("/proc"), uid: int | None = None) -> None:
    """Refuse (BadInput: nothing started yet) when ``nodes`` more nodes would not fit."""
    limit, held = usage(proc, uid)
    fit = max(0, (limit - held) // PER_NODE)
    if nodes <= fit:
        return
    raise BadInput(
        f"{nodes} lab node(s) would not fit under {SYSCTL} = {limit}: "
        f"{held} inotify instances are held already (the labs and services running now), "
        f"each node takes {PER_NODE}, so {fit} more node(s) fit",
        where="lab up --nodes",
        hint=f"`sysctl -w {SYSCTL}={max(ENOUGH, limit * 2)}` (as root; `make setup` does it), "
        f"take a lab down (`gpuboot lab status`, `gpuboot lab down --name NAME`), or ask for "
        f"at most {fit} node(s)",
    )
