"""nvidia-persistenced: enables persistence mode on every GPU and holds the driver open until
stopped; disables what it enabled on shutdown, as the real daemon does.

Forks and writes /run/nvidia-persistenced/nvidia-persistenced.pid like the real daemon
(NVIDIA's unit is Type=forking); `--foreground` (lab only) keeps it attached for a
Type=simple unit or a test.
"""

from __future__ import annotations

import sys

from . import daemon, kmod, model, state
from .state import Node

PIDFILE = "/run/nvidia-persistenced/nvidia-persistenced.pid"
FAILED = "nvidia-persistenced failed to initialize. Check syslog for more details.\n"


def main(argv: list[str]) -> int:
    if "-v" in argv or "--version" in argv:
        version = model.read_userspace("persistenced") or model.read_userspace("nvml")
        sys.stdout.write(f"nvidia-persistenced:  version {version or 'unknown'}\n\n")
        return 0
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(
            "nvidia-persistenced [--user USER] [--group GROUP] [--verbose] "
            "[--persistence-mode|--no-persistence-mode]\n"
        )
        return 0
    log = daemon.Logger("nvidia-persistenced")
    verbose = "-V" in argv or "--verbose" in argv
    enable = "--no-persistence-mode" not in argv
    node = state.load()
    if "nvidia" not in kmod.loaded(node):
        log(
            "Failed to query NVIDIA devices. Please ensure that the NVIDIA device files "
            "(/dev/nvidia*) exist, and that user has read and write permissions for those files."
        )
        sys.stderr.write(FAILED)
        return 1
    if kmod.pid_alive(node.vstate.get("persistenced_pid")):
        log("Failed to lock PID file: Resource temporarily unavailable")
        sys.stderr.write(FAILED)
        return 1
    enabled: list[str] = []

    def start(tx: Node) -> str | None:
        if kmod.pid_alive(tx.vstate.get("persistenced_pid")):
            return "Failed to lock PID file: Resource temporarily unavailable"
        pers = tx.vstate.setdefault("persistence", {})
        for g in model.gpus(tx):
            if g.lost:
                continue
            if enable and not pers.get(g.bus_id):
                pers[g.bus_id] = True
                enabled.append(g.bus_id)
            if verbose:
                word = "enabled" if enable else "disabled"
                log(f"device {g.bus4.lower()} - persistence mode {word}.")
        return None

    def stop(tx: Node) -> None:
        pers = tx.vstate.setdefault("persistence", {})
        for bus in enabled:
            pers.pop(bus, None)

    return daemon.run(
        log=log,
        key="persistenced_pid",
        pidfile=PIDFILE,
        foreground="--foreground" in argv or "-f" in argv,
        start=start,
        stop=stop,
        started="Started",
        stopped="Shutdown",
    )
