"""A thin podman wrapper that keeps the lab's storage and settings in GPUBOOT_HOME.

LAB-NOTES: the machine's defaults fail on this kernel (crun setrlimit, cgroups in
hybrid mode), so every call runs with project-owned containers.conf/storage.conf.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import RunError

CONTAINERS_CONF = """\
# Written by gpuboot: settings for the lab's podman only.
[containers]
# Root lacks CAP_SYS_RESOURCE here: the hard nofile limit is 20000, nproc >= 65535 fails.
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
# crun refuses cgroups in hybrid mode; runc 1.1 works.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def podman_env() -> dict[str, str]:
    root = paths.home() / "podman"
    conf, storage = root / "containers.conf", root / "storage.conf"
    if not conf.exists() or not storage.exists():
        root.mkdir(parents=True, exist_ok=True)
        conf.write_text(CONTAINERS_CONF)
        storage.write_text(
            "[storage]\n"
            'driver = "overlay"\n'
            f'graphroot = "{root / "storage"}"\n'
            f'runroot = "{root / "run"}"\n'
        )
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(conf)
    env["CONTAINERS_STORAGE_CONF"] = str(storage)
    return env


def podman(
    *args: str, input: bytes | None = None, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run podman; a failure becomes a RunError carrying podman's own message."""
    if shutil.which("podman") is None:
        raise RunError("podman is not installed", hint="run `make setup` (installs podman, runc)")
    proc = subprocess.run(
        ["podman", *args],
        env=podman_env(),
        input=input,
        capture_output=True,
        timeout=timeout,
    )
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    if check and proc.returncode != 0:
        raise RunError(
            f"podman {args[0]} failed: {err.strip() or out.strip()}",
            hint="see `gpuboot lab status`; LAB-NOTES.md lists the known podman quirks",
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def podman_json(*args: str) -> Any:
    return json.loads(podman(*args).stdout or "null")


def exists(kind: str, ident: str) -> bool:
    return podman(kind, "exists", ident, check=False).returncode == 0


def storage_root() -> Path:
    return paths.home() / "podman"
