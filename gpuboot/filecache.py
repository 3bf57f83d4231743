"""Parsed files kept while they do not change: a fleet's hosts name a few profiles and
stacks, each read, parsed and checked once per process; a file that changed is read again.

A file is known by its inode, modification time and size (lstat: a link or FIFO put in
its place is read again, and refused by the reader); what could not be stat'ed, or failed
to load, is never kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
Stamp = tuple[int, int, int]


def _stamp(path: Path) -> Stamp | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class FileCache(Generic[T]):
    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[Stamp, T]] = {}

    def get(self, key: Hashable, path: Path, load: Callable[[], T]) -> T:
        """What ``load`` made of ``path`` (kept under ``key``), loaded again once the file
        changed."""
        stamp = _stamp(path)
        kept = self._kept.get(key)
        if stamp is not None and kept is not None and kept[0] == stamp:
            return kept[1]
        value = load()
        if stamp is not None:
            self._kept[key] = (stamp, value)
        return value
