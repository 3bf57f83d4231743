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
