# Copyright: gpuboot; Apache-2.0
"""Files the collection's modules own on a node (pin files, boot lists, reboot markers,
managed_file's): read with their mode, and written whole or not at all. Stdlib only: a
node may run Python 3.9 (EL9)."""

from __future__ import annotations

import os
import stat
import tempfile

# gpuboot's own files are a few KiB. A larger one is not read whole: its text would travel
# back to the controller in the result (the diff's "before") and into the run's events.
READ_LIMIT = 1024 * 1024


def read_file(path):
    """(text, mode): ('', None) when there is no such file. Bytes that are not UTF-8 read as
    U+FFFD, a file over READ_LIMIT as a note: neither equals what gpuboot writes."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(READ_LIMIT + 1)
            mode = stat.S_IMODE(os.fstat(fh.fileno()).st_mode)
    except FileNotFoundError:
        return "", None
    if len(data) > READ_LIMIT:
        return f"(over {READ_LIMIT} bytes: not read)\n", mode
    return data.decode("utf-8", errors="replace"), mode


def write_file(path, text, mode=0o644):
    """Replace ``path`` with ``text`` at ``mode``: a new file renamed over the old one, so a
    crash or a full disk leaves the old file whole, never half of the new one."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".gpuboot-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def ensure_file(path, text, check_mode, mode=0o644, before=None):
    """Make ``path`` hold ``text`` at ``mode``, owned by the user the module runs as (root
    on a node); check mode writes nothing. True when it changes. ``before``: (text, mode)
    as read_file already returned it."""
    old, old_mode = read_file(path) if before is None else before
    if old == text and old_mode == mode and _owned(path):
        return False
    if not check_mode:
        write_file(path, text, mode)
    return True


def _owned(path):
    st = os.stat(path)
    return (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
