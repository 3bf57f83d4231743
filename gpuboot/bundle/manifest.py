"""MANIFEST.json: the run's hosts and verdicts and every file's sha256, written when the
run ends and checked before a host's evidence is judged again offline."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuboot import __version__, paths
from gpuboot.bundle.model import BundleError
from gpuboot.bundle.names import MANIFEST, is_safe_name
from gpuboot.bundle.store import read_file_capped

NO_MANIFEST_HINT = "re-certify the node, or pass --ignore-manifest to judge the bundle as it is"


def _sha256_file(path: Path) -> str | None:
    """The file's sha256, or None for anything but a regular file (never through a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(bundle: Path, run_id: str, verdicts: Mapping[str, str]) -> None:
    """MANIFEST.json: every regular file's sha256 (links are not followed nor listed:
    evaluate refuses them), written 0600; the bundle tree stays the operator's (0700).
    ``verdicts``: each host of the run (with or without evidence kept) -> its verdict."""
    files = {}
    for top, dirs, names in os.walk(bundle):  # never descends through a linked directory
        dirs.sort()
        for name in sorted(names):
            rel = str((Path(top) / name).relative_to(bundle))
            if rel != MANIFEST and (digest := _sha256_file(Path(top) / name)) is not None:
                files[rel] = digest
    manifest = {
        "run_id": run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpuboot": __version__,
        "hosts": dict(verdicts),
        "files": files,
    }
    paths.private_dir(bundle)
    paths.write_private(bundle / MANIFEST, json.dumps(manifest, indent=2))


@dataclass(frozen=True)
class Manifest:
    files: dict[str, dict[str, str]]  # host -> {file name: sha256}
    hosts: frozenset[str]  # every host of the run, with or without evidence kept

    def listed(self, host: str) -> dict[str, str]:
        """The host's files as the run left them ({} when it kept none)."""
        return self.files.get(host, {})


def read_manifest(root: Path) -> Manifest | str:
    """MANIFEST.json, or why it cannot vouch for the bundle."""
    path = root / MANIFEST
    if not os.path.lexists(path):
        return (
            "the bundle has no MANIFEST.json: its evidence cannot be shown unchanged since the run"
        )
    try:
        doc = json.loads(read_file_capped(path))
    except BundleError as exc:
        return f"MANIFEST.json unreadable: {exc.message}"
    except (ValueError, RecursionError) as exc:
        return f"MANIFEST.json is not valid JSON ({exc})"
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "MANIFEST.json is malformed: no files {path: sha256} mapping"
    run_hosts = doc.get("hosts") if isinstance(doc.get("hosts"), dict) else {}
    by_host: dict[str, dict[str, str]] = {}  # grouped once: a host's lookup is not a scan
    for rel, digest in files.items():
        host, sep, name = rel.partition("/")
        if sep:
            by_host.setdefault(host, {})[name] = digest
    names = set(by_host) | set(run_hosts)
    return Manifest(by_host, frozenset(h for h in names if is_safe_name(h)))


def check_manifest(manifest: Manifest | str, host: str, files: dict[str, bytes]) -> None:
    """BundleError unless the manifest vouches for exactly these files of the host."""
    if isinstance(manifest, str):
        raise BundleError(manifest, hint=NO_MANIFEST_HINT)
    listed = manifest.listed(host)
    problems = [f"{n} (added)" for n in sorted(set(files) - set(listed))]
    problems += [f"{n} (missing)" for n in sorted(set(listed) - set(files))]
    problems += [
        f"{n} (changed)"
        for n in sorted(set(files) & set(listed))
        if hashlib.sha256(files[n]).hexdigest() != listed[n]
    ]
    if problems:
        raise BundleError(
            f"evidence changed since the run: {', '.join(problems)}", hint=NO_MANIFEST_HINT
        )
