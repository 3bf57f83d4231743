"""The emulated kernel ring buffer (/run/gpuemu/kmsg.log: lost on reboot like the real one)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from . import paths
from .state import Node

# printk levels
ERR, WARNING, NOTICE, INFO = 3, 4, 5, 6


def log(node: Node, text: str, level: int = INFO, at: float | None = None) -> None:
    """Append one record; multi-line text stays one record (dmesg indents its continuation)."""
    boot = float(node.vstate.get("boot_time") or time.time())
    rec = {"t": max(0.0, (at if at is not None else time.time()) - boot), "p": level, "m": text}
    real = paths.p(paths.KMSG)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    # O_APPEND writes of one short line are atomic, so concurrent shims cannot interleave.
    fd = os.open(real, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(rec) + "\n").encode())
    finally:
        os.close(fd)


def records() -> list[dict[str, Any]]:
    try:
        with open(paths.p(paths.KMSG), encoding="utf-8") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn line from a crash: skip, like a corrupt ring-buffer record
    return out


def clear() -> None:
    with contextlib.suppress(FileNotFoundError):
        os.truncate(paths.p(paths.KMSG), 0)
