"""The lab's package repository on the controller: built once, cached in GPUBOOT_HOME.

Each lab serves it from a container on the lab network (see lab.py), so nodes reach
it without any route off that network.
"""

from __future__ import annotations

from gpuboot import paths
from gpuboot_lab.repo import RepoInfo, build_repo
from gpuboot_lab.rpmrepo import RpmRepoInfo, build_rpm_repo


def _gnupghome():
    gnupghome = paths.home() / "gnupg"
    gnupghome.mkdir(mode=0o700, parents=True, exist_ok=True)
    return gnupghome


def ensure_repo() -> RepoInfo:
    return build_repo(paths.home() / "repo", _gnupghome())


def ensure_rpm_repo() -> RpmRepoInfo:
    """The EL repositories, under the apt repository's root so the same server serves them
    (http://<repo>/rpm/...), signed with the same lab key."""
    return build_rpm_repo(paths.home() / "repo" / "rpm", _gnupghome())
