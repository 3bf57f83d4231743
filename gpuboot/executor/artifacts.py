"""Unpacking a shard's artifacts (the zip at the end of a worker's stream) on the controller.

The executor is trusted less than the controller: its zip is data, never a path to write
outside the shard's directory. ansible-runner's own unpacking restores symlinks and would
then write through them; here only regular files and directories under the target are
written (mode 0600/0700), and ``command`` loses the worker's environment, which would
otherwise carry the executor's variables into the controller's run directory.
"""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path, PurePosixPath

from gpuboot.executor.wire import ARTIFACTS_MAX, Cut

# ansible-runner's artifact file holding the worker's command line, cwd and environment
COMMAND_FILE = "command"


def _safe_parts(name: str) -> tuple[str, ...] | None:
    path = PurePosixPath(name)
    parts = tuple(p for p in path.parts if p not in ("", "."))
    if path.is_absolute() or not parts or ".." in parts or "\\" in name:
        return None
    return parts


def _without_env(text: bytes) -> bytes:
    try:
        doc = json.loads(text)
    except ValueError:
        return b"{}"
    kept = {k: doc[k] for k in ("command", "cwd") if isinstance(doc, dict) and k in doc}
    return json.dumps(kept).encode()


def unpack(raw: bytes, target: Path) -> list[str]:
    """Write the zip's regular files under ``target``; the names written. A member that is
    a link or leaves ``target`` is skipped; a zip that cannot be read is ``Cut``."""
    written: list[str] = []
    total = 0
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            for info in archive.infolist():
                parts = _safe_parts(info.filename)
                mode = info.external_attr >> 16
                if parts is None or stat.S_ISLNK(mode):
                    continue
                path = target.joinpath(*parts)
                if info.is_dir():
                    path.mkdir(mode=0o700, parents=True, exist_ok=True)
                    continue
                total += info.file_size
                if total > ARTIFACTS_MAX:
                    raise Cut(f"artifacts larger than {ARTIFACTS_MAX} bytes unpacked")
                data = archive.read(info)
                if parts == (COMMAND_FILE,):
                    data = _without_env(data)
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                path.unlink(missing_ok=True)
                path.touch(mode=0o600)
                path.write_bytes(data)
                written.append("/".join(parts))
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise Cut(f"artifacts could not be unpacked: {exc}") from exc
    return written
