"""Signed per-node certificates (schema ``gpuboot.certificate/v1``).

The signature is Ed25519 over the canonical JSON of the certificate without its
``signature`` member (sorted keys, no whitespace, UTF-8). The file on disk is the same
document pretty-printed by ``render``; ``verify`` of a file also requires the bytes to be
exactly that rendering, so *any* one-byte edit fails, including edits JSON parsing would
forgive (whitespace, ``\\u001f`` vs ``\\u001F``, ``1e+16`` vs ``1E+16``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gpuboot import __version__
from gpuboot.errors import BadInput
from gpuboot.report._util import (
    ERROR,
    FAIL,
    PASS,
    WARN,
    atomic_write,
    iso,
    parse_iso,
    utc_now,
)
from gpuboot.report.fingerprint import host_fingerprint

SCHEMA = "gpuboot.certificate/v1"
ALGORITHM = "Ed25519"
DEFAULT_VALIDITY_DAYS = 30
_MEASUREMENT_KEYS = (
    "name", "value", "unit", "median_of", "samples", "warn_below", "fail_below",
    "physical_limit", "physical_limit_source", "pct_of_limit", "margin", "expected",
    "status", "rule",
)  # fmt: skip
_SAFE_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$")
_REQUIRED = ("schema", "host", "verdict", "rules", "issued_at", "expires_at", "evidence")


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    reason: str
    certificate: dict[str, Any] | None = None

    def __bool__(self) -> bool:
        return self.ok


# ------------------------------------------------------------------ encoding


def canonical(cert: dict[str, Any]) -> bytes:
    """The signed bytes: everything but ``signature``, sorted keys, no whitespace, UTF-8."""
    body = {k: v for k, v in cert.items() if k != "signature"}
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def render(cert: dict[str, Any]) -> bytes:
    """The file form: readable, and byte-for-byte reproducible from the parsed document."""
    text = json.dumps(cert, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


# ------------------------------------------------------------------ keys


def _public_path(path: Path) -> Path:
    return path.with_name(path.name + ".pub")


def generate_key(path: Path | str) -> Path:
    """New Ed25519 key: PKCS#8 PEM at ``path`` (mode 0600) and SPKI PEM at ``path.pub``."""
    path = Path(path)
    if path.exists():
        raise BadInput(
            "refusing to overwrite an existing signing key",
            where=str(path),
            hint="certificates signed with it would no longer verify; pick a new path",
        )
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never world-readable
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    atomic_write(_public_path(path), pub)
    return path


def _read(path: Path, what: str, hint: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise BadInput(f"cannot read {what}: {reason}", where=str(path), hint=hint) from exc


def load_private_key(path: Path | str) -> Ed25519PrivateKey:
    path = Path(path)
    hint = "create one with `gpuboot certify --gen-key PATH` (or pass the right --sign-key)"
    data = _read(path, "signing key", hint)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise BadInput(
            f"not an unencrypted PEM private key ({exc})", where=str(path), hint=hint
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput("signing key is not an Ed25519 key", where=str(path), hint=hint)
    return key


def load_public_key(path: Path | str) -> Ed25519PublicKey:
    """A public key PEM (the ``.pub`` file); a private key PEM is accepted too."""
    path = Path(path)
    hint = "pass the .pub file written next to the signing key"
    data = _read(path, "public key", hint)
    try:
        key: Any = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            key = serialization.load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError) as exc:
            raise BadInput(f"not a PEM public key ({exc})", where=str(path), hint=hint) from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInput("public key is not an Ed25519 key", where=str(path), hint=hint)
    return key


# ------------------------------------------------------------------ issuing


def eligible(node_report: dict[str, Any], *, allow_warn: bool = False) -> bool:
    """Only PASS nodes (and WARN ones when the policy allows) are ever certified."""
    return node_report.get("verdict") == PASS or (allow_warn and node_report.get("verdict") == WARN)


def _evidence(bundle: Path, host: str) -> dict[str, Any]:
    hint = "issue certificates from the bundle `gpuboot certify` wrote, unmodified"
    manifest_path = bundle / "MANIFEST.json"
    raw = _read(manifest_path, "evidence manifest", hint)
    try:
        manifest = json.loads(raw)
        listed = manifest["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(
            f"evidence manifest is malformed ({exc})", where=str(manifest_path), hint=hint
        ) from exc
    host_files = {k: v for k, v in sorted(listed.items()) if k.startswith(f"{host}/")}
    if not (bundle / host).is_dir() or not host_files:
        raise BadInput(f"no evidence for host {host!r} in the bundle", where=str(bundle), hint=hint)
    for name, digest in host_files.items():  # the fingerprint must come from what was hashed
        data = _read(bundle / name, "evidence file", hint)
        if hashlib.sha256(data).hexdigest() != digest:
            raise BadInput(
                "evidence file changed since MANIFEST.json was written",
                where=str(bundle / name),
                hint=hint,
            )
    return {
        "run_id": manifest.get("run_id"),
        "bundle": str(bundle),
        "manifest_sha256": hashlib.sha256(raw).hexdigest(),
        "host_files": host_files,
    }


def _profile(host_dir: Path) -> str | None:
    try:
        meta = json.loads((host_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    pins = meta.get("pins") if isinstance(meta.get("pins"), dict) else {}
    return meta.get("profile") or pins.get("gpuboot_profile")


def issue(
    node_report: dict[str, Any],
    bundle_dir: Path | str,
    key_path: Path | str,
    *,
    validity_days: int = DEFAULT_VALIDITY_DAYS,
    allow_warn: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A signed certificate for one node of a certify report."""
    host = node_report.get("host")
    if not isinstance(host, str) or not _SAFE_HOST.match(host):
        # the host names a bundle directory and the certificate file: no path tricks
        raise BadInput(
            f"cannot certify host {host!r}: not a plain host name",
            hint="inventory host names are letters, digits, '.', '-', '_' and ':'",
        )
    if not eligible(node_report, allow_warn=allow_warn):
        raise BadInput(
            f"{host} has verdict {node_report.get('verdict')}: no certificate is issued",
            hint="only PASS nodes (WARN with the allow-warn policy) are certified",
        )
    if validity_days <= 0:
        raise BadInput(f"validity must be a positive number of days, not {validity_days}")
    key = load_private_key(key_path)
    bundle = Path(bundle_dir)
    evidence = _evidence(bundle, host)  # first: refuses a missing or changed bundle
    issued = (now or utc_now()).replace(microsecond=0)
    cert: dict[str, Any] = {
        "schema": SCHEMA,
        "host": host,
        "verdict": node_report["verdict"],
        "profile": _profile(bundle / host),
        "rules": [
            {k: f.get(k) for k in ("rule", "title", "status", "reason")}
            for f in sorted(node_report.get("findings", []), key=lambda f: str(f.get("rule")))
        ],
        "measurements": [
            {k: m[k] for k in _MEASUREMENT_KEYS if k in m}
            for m in node_report.get("measurements") or []
        ],
        "fingerprint": host_fingerprint(bundle / host),
        "evidence": evidence,
        "issued_at": iso(issued),
        "expires_at": iso(issued + timedelta(days=validity_days)),
        "issuer": {"tool": "gpuboot", "version": __version__},
    }
    try:
        payload = canonical(cert)
    except ValueError as exc:  # NaN/inf in a measurement: not representable in JSON
        raise BadInput(f"{host}: report holds a value JSON cannot carry ({exc})") from exc
    cert["signature"] = {
        "algorithm": ALGORITHM,
        "key_id": key_id(key.public_key()),
        "value": base64.b64encode(key.sign(payload)).decode("ascii"),
    }
    return cert


def write(cert: dict[str, Any], path: Path | str) -> Path:
    return atomic_write(Path(path), render(cert))


# ------------------------------------------------------------------ verifying


def _load(source: Path | str | bytes | dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(certificate, None) or (None, why it is not one); bytes are a file's content."""
    if isinstance(source, dict):
        return source, None
    if isinstance(source, bytes):
        data = source
    else:
        hint = "pass the certificates/<host>.json file certify wrote"
        data = _read(Path(source), "certificate", hint)
    try:
        cert = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"malformed certificate: not UTF-8 ({exc.reason} at byte {exc.start})"
    except ValueError as exc:
        return None, f"malformed certificate: invalid JSON ({exc})"
    if not isinstance(cert, dict):
        return None, "malformed certificate: the JSON document is not an object"
    try:
        same = render(cert) == data
    except ValueError:
        same = False
    if not same:
        return None, "certificate file was altered: its bytes are not the signed document's"
    return cert, None


def verify(
    cert: Path | str | bytes | dict[str, Any],
    public_key_path: Path | str,
    *,
    now: datetime | None = None,
) -> VerifyResult:
    """Check schema, signature (with this public key) and validity period, in that order.

    ``cert`` is a file path, a file's bytes, or an already parsed document (a dict skips
    the byte-exact layout check, which only a file can fail)."""
    public_key = load_public_key(public_key_path)
    doc, problem = _load(cert)
    if doc is None:
        return VerifyResult(False, problem or "malformed certificate")
    if doc.get("schema") != SCHEMA:
        return VerifyResult(False, f"unknown schema {doc.get('schema')!r} (expected {SCHEMA})")
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        return VerifyResult(False, f"malformed certificate: missing {', '.join(missing)}")
    sig = doc.get("signature")
    if not isinstance(sig, dict) or not sig.get("value"):
        return VerifyResult(False, "certificate is unsigned")
    if sig.get("algorithm") != ALGORITHM:
        return VerifyResult(False, f"unsupported signature algorithm {sig.get('algorithm')!r}")
    expected_id = key_id(public_key)
    if sig.get("key_id") != expected_id:
        return VerifyResult(
            False, f"signed by key {sig.get('key_id')}, not by the given key {expected_id}"
        )
    try:
        public_key.verify(base64.b64decode(sig["value"], validate=True), canonical(doc))
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        return VerifyResult(False, "signature does not match the certificate's content")
    if doc.get("verdict") not in (PASS, WARN) or any(
        r.get("status") in (FAIL, ERROR) for r in doc.get("rules", [])
    ):  # a correctly signed FAIL would be a signing bug; never honour it
        return VerifyResult(False, f"certificate carries verdict {doc.get('verdict')}")
    try:
        issued, expires = parse_iso(doc["issued_at"]), parse_iso(doc["expires_at"])
    except (TypeError, ValueError):
        return VerifyResult(False, "malformed certificate: issued_at/expires_at are not UTC times")
    at = now or utc_now()
    if at < issued:
        return VerifyResult(False, f"certificate is not valid before {doc['issued_at']}")
    if at >= expires:
        return VerifyResult(False, f"certificate expired at {doc['expires_at']}")
    return VerifyResult(True, f"valid until {doc['expires_at']} ({doc['host']})", doc)
