"""Every absolute path the emulator touches, prefixed by $GPUEMU_ROOT (tests run on the host)."""

from __future__ import annotations

import os


def root() -> str:
    return os.environ.get("GPUEMU_ROOT", "").rstrip("/")


def p(path: str) -> str:
    """Map an absolute in-node path to the real one (identity when GPUEMU_ROOT is unset)."""
    return root() + path


ETC = "/etc/gpuemu"
VARLIB = "/var/lib/gpuemu"
RUN = "/run/gpuemu"
MODULES = "/lib/modules/gpuemu"
USERSPACE = "/usr/lib/gpuemu/userspace"

PROFILE = ETC + "/profile.json"
PSTATE = VARLIB + "/state.json"
VSTATE = RUN + "/state.json"
KMSG = RUN + "/kmsg.log"
LOCK = VARLIB + "/.lock"
PROC = RUN + "/proc"
SYS = RUN + "/sys"
