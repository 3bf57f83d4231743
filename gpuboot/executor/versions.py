"""Version skew between the controller and an executor, found before any host is touched.

The controller's transmit, the executor's worker and the play's modules must be the same
ansible-core, ansible-runner and gpuboot: a skewed executor is refused (bad input, exit 2)
naming what differs and the command that aligns it. Every development build of gpuboot is
the same version, so gpuboot's code is compared by a digest of its shipped files as well:
an executor on older code at the same version would run other playbooks and roles.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
from importlib import metadata
from os import PathLike
from pathlib import Path

import gpuboot
from gpuboot.errors import BadInput, RunError
from gpuboot.executor.stream import Executor

PACKAGES = ("ansible-core", "ansible-runner", "gpuboot")
# Installed on the controller by choice (gpuboot[fast]: --strategy mitogen): shipped to the
# executors too, and held to the same version, so a run behaves alike on either side.
OPTIONAL = ("mitogen",)
REPORTED = (*PACKAGES, *OPTIONAL)
SOURCE = "gpuboot-source"  # the digest's key beside the versions
NOT_INSTALLED = "not installed"
NOT_REPORTED = "none reported"  # by a supervisor older than the digest
# What gpuboot's wheel carries of its package (pyproject's package-data): every module,
# these data files anywhere and all of ansible/ (role files without a suffix too), never
# bytecode nor hidden files (setuptools' globs skip them: editor swaps, tools' caches).
# An editable tree and the wheel built from it then hold the same files.
SHIPPED_SUFFIXES = frozenset({".py", ".yaml", ".yml", ".md", ".j2"})
SHIPPED_DIRS = frozenset({"ansible"})
DIGEST_CHARS = 24  # of the sha256's hex: short enough for a table, far past chance equality


def shipped(rel: Path) -> bool:
    """Whether the file at ``rel`` (relative to the package) is in gpuboot's wheel."""
    if (
        "__pycache__" in rel.parts
        or rel.suffix == ".pyc"
        or any(part.startswith(".") for part in rel.parts)
    ):
        return False
    return rel.suffix in SHIPPED_SUFFIXES or rel.parts[0] in SHIPPED_DIRS


def source_digest(package: Path) -> str:
    """sha256 over the sorted relative paths and bytes of ``package``'s shipped files."""
    files = sorted(
        p.relative_to(package).as_posix()
        for p in package.rglob("*")
        if p.is_file() and shipped(p.relative_to(package))
    )
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0" + (package / rel).read_bytes() + b"\0")
    return h.hexdigest()[:DIGEST_CHARS]


def local_versions() -> dict[str, str]:
    """The packages' versions here (an optional one "not installed" when it is not) and the
    digest of the gpuboot code that runs."""
    found = {}
    for name in REPORTED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = NOT_INSTALLED
    found[SOURCE] = source_digest(Path(gpuboot.__file__).parent)
    return found


def check_skew(
    executor: str, remote: dict[str, str], local: dict[str, str], inventory: str | PathLike
) -> None:
    """BadInput naming every package whose version differs on ``executor``, or, at the
    same versions, that its gpuboot code differs (``inventory`` names it for the fix)."""
    # setup installs the controller's own wheels offline (a hall has no package index)
    setup = f"gpuboot executor setup -i {shlex.quote(str(inventory))} --limit {executor}"
    differ = [p for p in REPORTED if remote.get(p, NOT_INSTALLED) != local.get(p, NOT_INSTALLED)]
    if differ:
        said = "; ".join(f"{p} {remote.get(p)} there, {local.get(p)} here" for p in differ)
        raise BadInput(
            f"executor {executor} runs other versions than the controller: {said}",
            where=f"executor {executor}",
            hint=setup,
        )
    if remote.get(SOURCE) != local.get(SOURCE):
        raise BadInput(
            f"executor {executor} runs other gpuboot code than the controller at the same "
            f"version {local.get('gpuboot')}: source digest {remote.get(SOURCE)} there, "
            f"{local.get(SOURCE)} here",
            where=f"executor {executor}",
            hint=setup,
        )


def remote_versions(argv: list[str], timeout_s: float = 60.0) -> dict[str, str]:
    """The versions and digest an executor's supervisor reports (``argv`` ends in its
    ``versions``)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        answer = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise RunError(f"could not ask the executor its versions: {exc}", where=argv[0]) from exc
    if not isinstance(answer, dict):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunError(
            f"the executor did not report its versions (exit {done.returncode}): {last}",
            where=" ".join(argv[:-1]),
        )
    found = {p: str(answer.get(p, NOT_INSTALLED)) for p in REPORTED}
    return {**found, SOURCE: str(answer.get(SOURCE, NOT_REPORTED))}


def check_executor(executor: Executor, inventory: str | PathLike, local: dict[str, str]) -> None:
    """Refuse ``executor`` (BadInput) unless it runs the ``local`` versions and code."""
    check_skew(executor.name, remote_versions(executor.command("versions")), local, inventory)
