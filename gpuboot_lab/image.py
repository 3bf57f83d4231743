"""The lab node image: built once from Debian's archive, cached by recipe hash."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpuboot import paths
from gpuboot.errors import RunError
from gpuboot_lab.podman import exists, podman_env

RECIPE = Path(__file__).resolve().parent / "image" / "build-node-image.sh"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def image_tag() -> str:
    digest = hashlib.sha256(RECIPE.read_bytes()).hexdigest()[:12]
    return f"localhost/gpuboot-node:{digest}"


def host_mirror(sources: Path = Path("/etc/apt/sources.list.d/debian.sources")) -> str:
    """The Debian mirror this machine already uses (the only archive it can reach)."""
    if sources.exists():
        m = re.search(r"^URIs:\s*(\S+)", sources.read_text(), re.M)
        if m:
            return m.group(1)
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        m = re.search(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s", legacy.read_text(), re.M)
        if m:
            return m.group(1)
    return DEFAULT_MIRROR


def ensure_image(log: Path | None = None) -> str:
    """Return the node image tag, building it first if this recipe was never built."""
    tag = image_tag()
    if exists("image", tag):
        return tag
    if shutil.which("debootstrap") is None:
        raise RunError("debootstrap is not installed", hint="run `make setup`")
    work = Path(tempfile.mkdtemp(prefix="image-", dir=paths.home()))
    log = log or paths.home() / "image-build.log"
    try:
        with log.open("wb") as out:
            proc = subprocess.run(
                ["sh", str(RECIPE), str(work / "rootfs"), host_mirror(), tag],
                env=podman_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if proc.returncode != 0:
            raise RunError(
                f"building the lab node image failed (exit {proc.returncode})",
                where=str(log),
                hint="read the log; the Debian mirror must be reachable",
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag
