"""A bundle's host directories written and read back: regular files only, within the caps,
never following a link nor blocking on a FIFO or device."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import stat
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.bundle.model import (
    MAX_FILE_BYTES,
    MAX_HOST_FILES,
    MAX_META_BYTES,
    MAX_NODE_BYTES,
    BundleError,
    Evidence,
    ProbeOutput,
)
from gpuboot.bundle.names import MANIFEST, META, is_safe_name
from gpuboot.errors import BadInput
from gpuboot.yamlsafe import loads_json_bounded


def bundle_host_dir(bundle: Path, host: str) -> Path:
    """``<bundle>/<host>``, for a host name that is one safe path component only."""
    if not is_safe_name(host):
        raise BundleError(
            f"host name {host!r} is not a single safe path component",
            where=str(bundle),
            hint="host names become directory names: use plain inventory host names",
        )
    return bundle / host


def bundle_hosts(root: Path) -> list[str]:
    """Entries that stand for a host: directories, and links (refused when judged)."""
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        raise BadInput(f"cannot list the bundle ({exc.strerror})", where=str(root)) from None
    out = []
    for name in names:
        with contextlib.suppress(OSError):  # gone since the listing: not a host
            if stat.S_ISDIR(os.lstat(root / name).st_mode) or os.path.islink(root / name):
                out.append(name)
    return out


def write_host_bundle(host_dir: Path, evidence: Evidence, meta: dict) -> None:
    """``<bundle>/<host>/<probe-file>`` (stdout only) plus meta.json (context, and each
    file's rc/stderr under "outputs"); 0700 directory, 0600 files, plain names only."""
    if ".." in host_dir.parts or not is_safe_name(host_dir.name):
        raise BundleError("host directory is not <bundle>/<plain name>", where=str(host_dir))
    bad = [n for n in evidence if not is_safe_name(n) or n in (META, MANIFEST)]
    if bad:
        raise BundleError(
            f"evidence file name(s) {bad!r} are not plain probe file names",
            where=str(host_dir),
            hint="evidence names come from the collection script and pair probes only",
        )
    if os.path.islink(host_dir):
        raise BundleError("host directory is a link", where=str(host_dir))
    paths.private_dir(host_dir.parent)  # the bundle, and each host in it: 0700
    paths.private_dir(host_dir)
    # 0600, atomically replaced: a link planted at a file's name is replaced, not followed
    for name, out in evidence.items():
        paths.write_private(host_dir / name, out.stdout)
    outputs = {n: _output_record(o) for n, o in evidence.items()}
    meta = {**meta, "outputs": outputs}
    paths.write_private(host_dir / META, json.dumps(meta, indent=2, sort_keys=True))


def _output_record(out: ProbeOutput) -> dict[str, Any]:
    """meta.json's entry of one file: rc, stderr and where its stdout ended ("bytes", the
    end marker host_bundle checks), or why it is known not to be whole."""
    if out.incomplete:
        return {"rc": out.rc, "stderr": out.stderr, "incomplete": out.incomplete}
    return {"rc": out.rc, "stderr": out.stderr, "bytes": len(out.stdout.encode())}


def read_file_capped(path: Path, cap: int | None = None) -> bytes:
    """A regular file's bytes, never following a link nor blocking on a FIFO or device."""
    cap = MAX_FILE_BYTES if cap is None else cap
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BundleError(
            f"cannot open {path.name} ({exc.strerror}): not a regular file or unreadable",
            where=str(path),
        ) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path.name} is not a regular file", where=str(path))
        if st.st_size > cap:
            raise BundleError(
                f"{path.name} is {st.st_size} bytes, over the {cap}-byte cap", where=str(path)
            )
        data = f.read(cap + 1)
    if len(data) > cap:
        raise BundleError(f"{path.name} grew past the {cap}-byte cap", where=str(path))
    return data


def read_host_files(host_dir: Path) -> dict[str, bytes]:
    """Every file of a host directory: regular files only (no links, FIFOs, devices or
    subdirectories: BundleError), each and all together within the caps."""
    try:
        if not stat.S_ISDIR(os.lstat(host_dir).st_mode):
            raise BundleError("host directory is a link or not a directory", where=str(host_dir))
        with os.scandir(host_dir) as entries:
            names = sorted(itertools.islice((e.name for e in entries), MAX_HOST_FILES + 1))
    except OSError as exc:
        raise BundleError(f"cannot list ({exc.strerror})", where=str(host_dir)) from None
    if len(names) > MAX_HOST_FILES:
        raise BundleError(
            f"the host directory holds more than {MAX_HOST_FILES} files: not a host's evidence",
            where=str(host_dir),
            hint="a bundle holds the files one run collected; re-run certify for fresh evidence",
        )
    files: dict[str, bytes] = {}
    total = 0
    for name in names:
        path = host_dir / name
        try:
            mode = os.lstat(path).st_mode
        except OSError as exc:
            raise BundleError(f"cannot stat ({exc.strerror})", where=str(path)) from None
        if not stat.S_ISREG(mode):
            raise BundleError(
                f"{name!r} is a link, directory or special file, not evidence",
                where=str(path),
                hint="a bundle holds regular files only; re-run certify for fresh evidence",
            )
        files[name] = read_file_capped(path)
        total += len(files[name])
        if total > MAX_NODE_BYTES:
            raise BundleError(
                f"the host's files exceed the {MAX_NODE_BYTES}-byte cap", where=str(host_dir)
            )
    return files


def _outputs(meta: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """Per-file rc/stderr; bundles before "outputs" kept them under "probes" (which now
    holds the probe level), so an old bundle's level is unknown."""
    old = meta.pop("probes") if isinstance(meta.get("probes"), dict) else None
    if meta.get("probes") is not None and not isinstance(meta["probes"], str):
        raise BundleError("meta.json: probes must name the probe level", where=where)
    outputs = meta.get("outputs", old) or {}
    if not isinstance(outputs, dict) or not all(
        isinstance(v, dict)
        and isinstance(v.get("rc", 0), int)
        and not isinstance(v.get("rc", 0), bool)
        and isinstance(v.get("stderr", ""), str)
        and _count(v.get("bytes", 0)) is not None
        and isinstance(v.get("incomplete", ""), str)
        for v in outputs.values()
    ):
        raise BundleError("meta.json: outputs must map files to {rc, stderr, bytes}", where=where)
    return outputs


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def cut_short(name: str, data: bytes, info: dict[str, Any], collected: bool) -> str:
    """Why a bundle file is not the whole output gpuboot kept ("" when it is, or when the
    bundle has no end markers: hand-collected). ``collected``: gpuboot's collection
    produced the file (meta.json "commands"), so its end marker must be there."""
    if info.get("incomplete"):
        why = info["incomplete"][:300]  # every rule reading the file repeats it
        return why if why.startswith(f"{name}: ") else f"{name}: {why}"
    if "bytes" in info:
        # shorter only: a longer file was edited, not cut (MANIFEST.json says which changed)
        if len(data) < info["bytes"]:
            return f"{name}: truncated: {len(data)} bytes of the {info['bytes']} gpuboot kept"
        return ""
    if collected:
        return f"{name}: truncated: no end marker in meta.json (gpuboot records one per file)"
    return ""


def parse_meta(data: bytes | None, where: str) -> dict[str, Any]:
    """meta.json as a JSON object of bounded size ({} when absent: real captures)."""
    if data is None:
        return {}
    if len(data) > MAX_META_BYTES:
        raise BundleError(f"meta.json over the {MAX_META_BYTES}-byte cap", where=where)
    try:
        meta = loads_json_bounded(data)  # nesting bounded: every later walk of it stays shallow
    except ValueError as exc:
        raise BundleError(f"meta.json is not valid JSON ({exc})", where=where) from None
    if not isinstance(meta, dict):
        raise BundleError("meta.json is not a JSON object", where=where)
    for key, kind in (("pins", dict), ("rules", list), ("pairs", dict)):
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            raise BundleError(f"meta.json: {key} must be a {kind.__name__}", where=where)
    if not all(isinstance(r, str) for r in meta.get("rules") or []):
        raise BundleError("meta.json: rules must list rule ids", where=where)
    return meta


def host_bundle(files: dict[str, bytes], where: str) -> tuple[Evidence, dict]:
    """Evidence and meta from a host directory's files (read_host_files)."""
    meta = parse_meta(files.get(META), where)
    outputs = _outputs(meta, where)
    # gpuboot's own collection lists each file's command, and since end markers were kept,
    # each file's "bytes": there a file without one is cut. A bundle without any (a capture,
    # or kept before the markers) is judged as it is.
    commands = meta.get("commands")
    marked = any("bytes" in v or "incomplete" in v for v in outputs.values())
    collected = commands if isinstance(commands, dict) and marked else {}
    evidence: Evidence = {}
    for name, data in files.items():
        if name == META:
            continue
        info = outputs.get(name, {})
        evidence[name] = ProbeOutput(
            stdout=data.decode(errors="replace"),
            stderr=info.get("stderr", ""),
            rc=info.get("rc", 0),
            incomplete=cut_short(name, data, info, name in collected),
        )
    return evidence, meta


def read_host_bundle(host_dir: Path) -> tuple[Evidence, dict]:
    """Read back what write_host_bundle wrote; a bundle of real captures may lack meta.json."""
    return host_bundle(read_host_files(host_dir), str(host_dir))
