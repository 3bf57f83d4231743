"""Where gpuboot keeps its state on the controller.

``GPUBOOT_HOME`` (default ``~/.local/share/gpuboot``) holds the lab image's podman
storage, the lab signing key and package repository, the labs themselves, the host
locks and the kept run directories (``GPUBOOT_RUNS``, default ``$GPUBOOT_HOME/runs``).
Nothing is written outside it. Run directories hold host data (results, evidence): they
are private to the operator (0700), their records 0600.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from gpuboot.errors import BadInput, ConfigError, GpubootError, RunError

STATE_HINT = "set GPUBOOT_HOME (and GPUBOOT_RUNS, if set) to a writable directory with free space"


def _env_dir(var: str) -> Path | None:
    """The directory an environment variable names; set but empty is a mistake, not ``.``."""
    value = os.environ.get(var)
    if value is None:
        return None
    if not value.strip():
        raise ConfigError(
            f"{var} is set but empty",
            where=f"environment variable {var}",
            hint=f"unset {var}, or set it to a directory (e.g. {var}=$HOME/gpuboot)",
        )
    return Path(value).expanduser()


def home() -> Path:
    base = _env_dir("GPUBOOT_HOME")
    if base is None:
        # Path.home() of an empty HOME is "/": state would land under /.local.
        if not os.environ.get("HOME", "unset").strip():
            raise ConfigError(
                "HOME is set but empty: gpuboot would keep its state under /.local",
                where="environment variable HOME",
                hint="set HOME to your home directory, or GPUBOOT_HOME to a directory "
                "for gpuboot's state",
            )
        try:
            base = Path.home() / ".local" / "share" / "gpuboot"
        except RuntimeError as exc:  # no HOME and no passwd entry
            raise ConfigError(
                f"no home directory: {exc}",
                where="environment variable HOME",
                hint="set GPUBOOT_HOME to a directory for gpuboot's state",
            ) from exc
    return base.resolve()


def labs_dir() -> Path:
    return home() / "labs"


def runs_dir() -> Path:
    return (_env_dir("GPUBOOT_RUNS") or home() / "runs").resolve()


# The operator's own setting is wrong (read-only, no permission, not a directory): bad
# input. Anything else (a full disk, an I/O error) is the run breaking.
_SETTING_ERRNOS = {
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EEXIST,
    errno.ENOENT,
    errno.ELOOP,
}


def fs_error(exc: OSError, what: str | None = None, *, hint: str = STATE_HINT) -> GpubootError:
    """An OSError on a controller file as gpuboot's error: the path, the errno text, the fix."""
    where = str(exc.filename) if exc.filename is not None else (what or "a controller file")
    strerror = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return RunError(
            f"cannot write {what or 'there'}: disk full ({strerror})",
            where=where,
            hint="free space on that file system, or " + hint,
        )
    kind = BadInput if exc.errno in _SETTING_ERRNOS else RunError
    return kind(f"cannot write {what or 'there'}: {strerror}", where=where, hint=hint)


def private_dir(path: Path, *, hint: str = STATE_HINT) -> Path:
    """Create ``path`` (and missing parents) readable by the operator alone (0700)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError as exc:
        raise fs_error(exc, f"directory {path}", hint=hint) from exc
    return path


def write_private(path: Path, text: str, *, hint: str = STATE_HINT) -> Path:
    """Replace ``path`` atomically with ``text``, mode 0600: a reader never sees half a
    record (a killed or out-of-space write leaves the previous one), nobody else reads it."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:  # mkstemp: mode 0600
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise fs_error(exc, str(path), hint=hint) from exc
    return path


PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_DIR = PACKAGE_DIR.parent
# The Ansible content ships inside the package (a wheel carries it): roles, playbooks.
ANSIBLE_DIR = PACKAGE_DIR / "ansible"
ROLES_DIR = ANSIBLE_DIR / "roles"
PLAYBOOKS_DIR = ANSIBLE_DIR / "playbooks"
# gpuboot's own collection (gpuboot.node: the package roles' modules), for ANSIBLE_COLLECTIONS_PATH
COLLECTIONS_DIR = ANSIBLE_DIR / "collections"


def put_venv_on_path() -> str:
    """Ansible's CLIs live beside our interpreter; runner and testinfra call them by name
    and fail with rc 127 when that directory is not on PATH (LAB-NOTES)."""
    import sys

    venv_bin = str(Path(sys.executable).parent)
    current = os.environ.get("PATH", "/usr/bin:/bin")
    if venv_bin not in current.split(os.pathsep):
        os.environ["PATH"] = f"{venv_bin}{os.pathsep}{current}"
    return os.environ["PATH"]
