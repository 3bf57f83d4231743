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
EL_RECIPE = RECIPE.with_name("build-node-image-el.sh")
EL_MAJORS = ("8", "9", "10")
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def image_tag() -> str:
    digest = hashlib.sha256(RECIPE.read_bytes()).hexdigest()[:12]
    return f"localhost/gpuboot-node:{digest}"


def el_image_tag(major: str) -> str:
    """The EL flavour is built on the Debian image: its tag hashes both recipes."""
    digest = hashlib.sha256(RECIPE.read_bytes() + EL_RECIPE.read_bytes()).hexdigest()[:12]
    return f"localhost/gpuboot-node-el{major}:{digest}"


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
    _build(RECIPE, tag, log or paths.home() / "image-build.log")
    return tag


def ensure_el_image(major: str, log: Path | None = None) -> str:
    """Return the EL``major`` node image tag, building it (and the Debian base) if needed."""
    if major not in EL_MAJORS:
        raise RunError(f"no EL{major} image recipe", hint=f"EL majors: {', '.join(EL_MAJORS)}")
    tag = el_image_tag(major)
    if exists("image", tag):
        return tag
    base = ensure_image(log)
    _build(EL_RECIPE, tag, log or paths.home() / f"image-build-el{major}.log", major, base)
    return tag


def _build(recipe: Path, tag: str, log: Path, *extra: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="image-", dir=paths.home()))
    try:
        with log.open("wb") as out:
            proc = subprocess.run(
                ["sh", str(recipe), str(work / "rootfs"), host_mirror(), tag, *extra],
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
