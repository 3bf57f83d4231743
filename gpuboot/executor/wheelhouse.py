"""The wheels an executor's venv is made of: the controller's own ansible-core,
ansible-runner and gpuboot with everything they require, at the versions installed here.

Halls have no index to install from, so the controller packs what it runs: an installed
distribution is zipped back into its wheel from its RECORD (the bytes that run here, under
the tags its WHEEL file names); one installed editable from a source tree (a developer's
checkout) is built from a copy of that tree. The result is cached under GPUBOOT_HOME by a
key over every name, version and digest of what it is made of (the tree, or the installed
RECORD), so a second setup builds nothing and other code at the same version builds anew.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.markers import default_environment
from packaging.requirements import Requirement

from gpuboot import paths
from gpuboot.errors import RunError
from gpuboot.executor.versions import OPTIONAL, PACKAGES

BOOTSTRAP = "pip"  # run from its wheel to install the others: the venv is made without pip
# Installed-only files a wheel does not carry (RECORD is written anew).
NOT_IN_WHEEL = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed: the same installed bytes give the same wheel
TAR_NAME = "wheelhouse.tar"
KEEP = 3  # wheelhouses kept (newest first): each a controller's versions not long ago


@dataclass(frozen=True)
class Wheelhouse:
    key: str
    tar: Path  # the wheels in one file: one copy to each executor, compared by checksum
    wheels: tuple[str, ...]  # file names, installed together
    pip: str  # the bootstrap's wheel
    python: str  # the X.Y the wheels are for


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(roots: tuple[str, ...] = PACKAGES) -> dict[str, metadata.Distribution]:
    """``roots`` and every distribution they require here, by canonical name (extras not
    asked for, and requirements whose markers exclude this Python, are left out)."""
    env = {**default_environment(), "extra": ""}
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = canonical(todo.pop())
        if name in found:
            continue
        found[name] = dist = _installed(name)
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return found


def _installed(name: str) -> metadata.Distribution:
    """The installation of ``name`` that runs here: the first on sys.path that pip installed
    (a RECORD or direct_url.json), not the metadata a source tree's setup left in the
    working directory (an .egg-info)."""
    found = list(metadata.distributions(name=name))
    if not found:
        raise RunError(
            f"{name} is required by the executor's venv but not installed here",
            where=sys.prefix,
            hint="reinstall gpuboot on the controller (pip install gpuboot)",
        )
    installed = (d for d in found if d.read_text("RECORD") or d.read_text("direct_url.json"))
    return next(installed, found[0])


def _source_dir(dist: metadata.Distribution) -> Path | None:
    """The tree an editable install runs from, or None for an installed wheel."""
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    info = json.loads(text)
    if not info.get("dir_info", {}).get("editable"):
        return None
    return Path(unquote(urlparse(info["url"]).path))


def _tree_files(root: Path, packages: list[str]) -> list[str]:
    """What a wheel is built from in a source tree: its top-level files (pyproject.toml...)
    and its ``packages``' directories, as git lists them (new files too, ignored ones not)."""
    out = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if out.returncode != 0:
        raise RunError(
            f"gpuboot runs from the source tree {root}, which is not a git checkout: its "
            "wheel cannot be built from a known list of files",
            where=str(root),
            hint="install gpuboot from its wheel on the controller (pip install gpuboot)",
        )
    names = out.stdout.decode().split("\0")
    wanted = [f for f in names if "/" not in f or f.split("/", 1)[0] in packages]
    return sorted(f for f in wanted if f and (root / f).is_file())


def _digest(root: Path, files: list[str]) -> str:
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()


def _record_digest(dist: metadata.Distribution) -> str:
    """What an installed distribution's wheel is repacked from: its RECORD holds each file's
    sha256, so another build of the same version installed here gives another digest."""
    return hashlib.sha256((dist.read_text("RECORD") or "").encode()).hexdigest()


def cache_key(dists: dict[str, metadata.Distribution], sources: dict[str, str]) -> str:
    """One key over the Python X.Y, every name and version, and what each is made of."""
    doc = {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "dists": sorted((n, d.version, sources.get(n, "")) for n, d in dists.items()),
    }
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:24]


def _tags(wheel_meta: str) -> str:
    """The file name's tag triple from a WHEEL file's Tag lines (compressed tag sets)."""
    tags = [
        line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")
    ]
    if not tags:
        raise RunError("an installed distribution's WHEEL file names no tag")
    parts = zip(*(t.split("-") for t in tags), strict=True)
    return "-".join(".".join(dict.fromkeys(p)) for p in parts)


def repack(dist: metadata.Distribution, out_dir: Path) -> Path:
    """The installed ``dist`` zipped back into its wheel: its files under site-packages as
    its RECORD lists them (scripts outside it are re-made by pip from the entry points)."""
    files = [
        f for f in dist.files or () if not str(f).startswith("..") and "__pycache__" not in f.parts
    ]
    info = next(
        (f.parent for f in files if f.name == "METADATA" and f.parent.name.endswith(".dist-info")),
        None,
    )
    wheel_meta = dist.read_text("WHEEL")
    if info is None or wheel_meta is None:
        raise RunError(f"{dist.name} {dist.version}: installed without a RECORD or WHEEL file")
    name = re.sub(r"[-_.]+", "_", dist.name)
    target = out_dir / f"{name}-{dist.version}-{_tags(wheel_meta)}.whl"
    record = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as whl:
        for rel in sorted(files, key=str):
            if rel.parent == info and rel.name in NOT_IN_WHEEL:
                continue
            path = Path(rel.locate())
            data = path.read_bytes()
            entry = zipfile.ZipInfo(rel.as_posix(), ZIP_TIME)
            entry.external_attr = (path.stat().st_mode & 0o777 | 0o100000) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(entry, data)
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{rel.as_posix()},sha256={sha},{len(data)}")
        record.append(f"{info.as_posix()}/RECORD,,")
        entry = zipfile.ZipInfo(f"{info.as_posix()}/RECORD", ZIP_TIME)
        whl.writestr(entry, "\n".join(record) + "\n")
    return target


def build_from_source(root: Path, files: list[str], out_dir: Path, work: Path) -> Path:
    """The wheel of an editable install, built from a copy of its tree (setuptools' build/
    in the tree itself could hold stale files)."""
    copy = work / "src"
    for rel in files:
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, copy / rel)
    before = set(out_dir.iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out_dir), str(copy)],
        capture_output=True,
        text=True,
        check=False,
    )
    made = sorted(set(out_dir.iterdir()) - before)
    if done.returncode != 0 or len(made) != 1:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunError(f"building a wheel of {root} failed: {last}", where=str(root))
    return made[0]


def ensure(progress=lambda _msg: None) -> Wheelhouse:
    """The cached wheelhouse of this controller's versions, built on first use."""
    optional = tuple(p for p in OPTIONAL if any(metadata.distributions(name=p)))  # installed
    dists = requirements((*PACKAGES, *optional, BOOTSTRAP))
    trees = {n: root for n, d in dists.items() if (root := _source_dir(d)) is not None}
    files = {
        n: _tree_files(root, (dists[n].read_text("top_level.txt") or n).split())
        for n, root in trees.items()
    }
    made_of = {
        n: _digest(trees[n], files[n]) if n in trees else _record_digest(d)
        for n, d in dists.items()
    }
    key = cache_key(dists, made_of)
    home = paths.home() / "executor-wheelhouse"
    done = home / key / "wheelhouse.json"
    if not done.exists():
        progress(f"building the executors' wheelhouse ({len(dists)} distributions, once)")
        _build(dists, trees, files, home, key)
        _prune(home, key)
    doc = json.loads(done.read_text())
    return Wheelhouse(key, home / key / TAR_NAME, tuple(doc["wheels"]), doc["pip"], doc["python"])


def _prune(home: Path, key: str) -> None:
    """Keep the newest wheelhouses, ``key``'s among them."""
    built = sorted(
        (p for p in home.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in [p for p in built if p.name != key][KEEP - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def _build(dists, trees, files, home: Path, key: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
        work = Path(tmp)
        wheels_dir = work / "wheels"
        wheels_dir.mkdir()
        made = {}
        for name, dist in sorted(dists.items()):
            if name in trees:
                made[name] = build_from_source(trees[name], files[name], wheels_dir, work)
            else:
                made[name] = repack(dist, wheels_dir)
        out = work / key
        out.mkdir()
        with tarfile.open(out / TAR_NAME, "w") as tar:
            for path in sorted(made.values()):
                info = tar.gettarinfo(str(path), arcname=path.name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                with path.open("rb") as f:
                    tar.addfile(info, f)
        doc = {
            "wheels": sorted(p.name for p in made.values()),
            "pip": made[BOOTSTRAP].name,
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
            "versions": {n: d.version for n, d in sorted(dists.items())},
        }
        (out / "wheelhouse.json").write_text(json.dumps(doc, indent=2))
        try:
            out.rename(home / key)
        except OSError:  # another setup built the same key meanwhile: theirs is as good
            if not (home / key / "wheelhouse.json").exists():
                raise
