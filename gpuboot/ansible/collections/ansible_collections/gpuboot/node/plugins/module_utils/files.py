# Copyright: gpuboot; Apache-2.0
"""Files the collection's modules own on a node (pin files, boot lists, reboot markers):
read with their mode, and written whole at mode 0644 or not at all. Stdlib only: a node
may run Python 3.9 (EL9)."""

from __future__ import annotations

import os
import stat
import tempfile


def read_file(path):
    """(text, mode): ('', None) when there is no such file."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read(), stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
    except FileNotFoundError:
        return "", None


def write_file(path, text):
    """Replace ``path`` with ``text`` at mode 0644: a new file renamed over the old one, so a
    crash or a full disk leaves the old file whole, never half of the new one."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gpuboot-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
