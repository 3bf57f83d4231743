"""Version skew between the controller and an executor, found before any host is touched.

The controller's transmit, the executor's worker and the play's modules must be the same
ansible-core, ansible-runner and gpuboot: a skewed executor is refused (bad input, exit 2)
naming what differs and the command that aligns it.
"""

from __future__ import annotations

import json
import subprocess
from importlib import metadata

from gpuboot.errors import BadInput, RunError
from gpuboot.executor.stream import Executor

PACKAGES = ("ansible-core", "ansible-runner", "gpuboot")
NOT_INSTALLED = "not installed"


def local_versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = NOT_INSTALLED
    return found


def check_skew(executor: str, remote: dict[str, str], local: dict[str, str]) -> None:
    """BadInput naming every package whose version differs on ``executor``."""
    differ = [p for p in PACKAGES if remote.get(p) != local.get(p)]
    if not differ:
        return
    said = "; ".join(f"{p} {remote.get(p)} there, {local.get(p)} here" for p in differ)
    pins = " ".join(f"'{p}=={local[p]}'" for p in PACKAGES if local.get(p) != NOT_INSTALLED)
    raise BadInput(
        f"executor {executor} runs other versions than the controller: {said}",
        where=f"executor {executor}",
        hint=f"on {executor}, in gpuboot's venv: pip install {pins}",
    )


def remote_versions(argv: list[str], timeout_s: float = 60.0) -> dict[str, str]:
    """The versions an executor's supervisor reports (``argv`` ends in its ``versions``)."""
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
    return {p: str(answer.get(p, NOT_INSTALLED)) for p in PACKAGES}


def check_executor(executor: Executor) -> None:
    """Refuse ``executor`` (BadInput) unless it runs the controller's versions."""
    remote = remote_versions(executor.command("versions"))
    check_skew(executor.name, remote, local_versions())
