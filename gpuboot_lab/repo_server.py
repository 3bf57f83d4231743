"""The lab's package repository on the controller: built once, cached in GPUBOOT_HOME.

Each lab serves it from a container on the lab network (see lab.py), so nodes reach
it without any route off that network.
"""

from __future__ import annotations

from gpuboot import paths
from gpuboot_lab.repo import RepoInfo, build_repo


def ensure_repo() -> RepoInfo:
    home = paths.home()
    gnupghome = home / "gnupg"
    gnupghome.mkdir(mode=0o700, parents=True, exist_ok=True)
    return build_repo(home / "repo", gnupghome)
