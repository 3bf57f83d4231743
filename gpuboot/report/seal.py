"""The bundle's MANIFEST.json sealed with the run's certify key: its file hashes alone are
an unkeyed checksum anyone can recompute after editing, swapping or cloning a host's
directory. Sealed, the manifest also binds each host directory to that host's hardware
identity (the fingerprint of the files it lists), and a reader holding the public key
knows the evidence is the run's. A run without a key (a scan) leaves it unsigned, and
readers say so."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.bundle.names import MANIFEST, is_safe_name
from gpuboot.bundle.store import read_file_capped
from gpuboot.errors import BadInput, GpubootError
from gpuboot.report.fingerprint import host_fingerprint, identity
from gpuboot.report.signing import canonical, sign, signature_problem
from gpuboot.yamlsafe import loads_json_bounded


def _manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / MANIFEST
    try:
        doc = loads_json_bounded(read_file_capped(path))
    except (GpubootError, ValueError) as exc:
        raise BadInput(
            f"evidence manifest unreadable: {getattr(exc, 'message', exc)}",
            where=str(path),
            hint="seal the MANIFEST.json `gpuboot certify` wrote, unmodified",
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict):
        raise BadInput("evidence manifest is malformed", where=str(path))
    return doc


def listed(doc: dict[str, Any], host: str) -> dict[str, str]:
    """The host's files the manifest lists (plain names only) -> sha256."""
    prefix = f"{host}/"
    return {
        k.removeprefix(prefix): v
        for k, v in doc["files"].items()
        if k.startswith(prefix) and is_safe_name(k.removeprefix(prefix))
    }


def identity_digest(host_dir: Path, names: list[str]) -> str:
    """sha256 of the hardware identity the listed files show (GPU serials and slots, NIC
    GUIDs, placement, driver and stack): what binds a directory to its node."""
    facts = identity(host_fingerprint(host_dir, names))
    return hashlib.sha256(canonical(facts)).hexdigest()


def seal(bundle: Path, key: Any) -> None:
    """Bind every host directory to its identity and sign MANIFEST.json with ``key`` (an
    Ed25519 private key)."""
    doc = _manifest(bundle)
    hosts = sorted({k.partition("/")[0] for k in doc["files"] if "/" in k})
    doc["identities"] = {
        h: identity_digest(bundle / h, sorted(listed(doc, h)))
        for h in hosts
        if is_safe_name(h) and (bundle / h).is_dir()
    }
    doc["signature"] = sign(doc, key)
    paths.write_private(bundle / MANIFEST, json.dumps(doc, indent=2))


def seal_problem(bundle: Path, public_key: Any, host: str | None = None) -> str | None:
    """Why the manifest is not sealed by this key (or does not bind ``host``'s directory to
    the identity its listed files show); None when it is."""
    doc = _manifest(bundle)
    if problem := signature_problem(doc, public_key):
        return f"bundle manifest {problem}"
    if host is not None:
        bound = (doc.get("identities") or {}).get(host)
        if bound != identity_digest(bundle / host, sorted(listed(doc, host))):
            return f"bundle manifest does not bind {host}'s directory to the hardware it shows"
    return None


def seal_state(bundle: Path) -> str:
    """How the manifest vouches for the bundle, in words (without checking a key)."""
    try:
        sig = _manifest(bundle).get("signature")
    except BadInput:
        return "unreadable"
    if isinstance(sig, dict) and sig.get("value"):
        return f"signed by {sig.get('key_id')}"
    return "unsigned (file checksums only: not proof against an edit)"
