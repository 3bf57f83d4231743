"""Where gpuboot keeps its state on the controller.

``GPUBOOT_HOME`` (default ``~/.local/share/gpuboot``) holds the lab image's podman
storage, the lab signing key and package repository, the labs themselves and the
kept run directories. Nothing is written outside it.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    env = os.environ.get("GPUBOOT_HOME")
    base = Path(env) if env else Path.home() / ".local" / "share" / "gpuboot"
    return base.expanduser().resolve()


def labs_dir() -> Path:
    return home() / "labs"


def runs_dir() -> Path:
    return Path(os.environ.get("GPUBOOT_RUNS", home() / "runs")).resolve()


PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_DIR = PACKAGE_DIR.parent


def put_venv_on_path() -> str:
    """Ansible's CLIs live beside our interpreter; runner and testinfra call them by name
    and fail with rc 127 when that directory is not on PATH (LAB-NOTES)."""
    import sys

    venv_bin = str(Path(sys.executable).parent)
    current = os.environ.get("PATH", "/usr/bin:/bin")
    if venv_bin not in current.split(os.pathsep):
        os.environ["PATH"] = f"{venv_bin}{os.pathsep}{current}"
    return os.environ["PATH"]
