"""Signed per-node certificates (schema ``gpuboot.certificate/v3``).

The signature is Ed25519 over the canonical JSON of the certificate without its
``signature`` member (sorted keys, no whitespace, UTF-8). The file on disk is the same
document pretty-printed by ``render``; ``verify`` of a file also requires the bytes to be
exactly that rendering, so *any* one-byte edit fails, including edits JSON parsing would
forgive (whitespace, ``\\u001f`` vs ``\\u001F``, ``1e+16`` vs ``1E+16``).

A certificate says what was proven: what the run measured (``measured``: probe level,
repeats, DCGM diag level, GPUs, rails against the profile's, pair partners), every check
with its status and reason (SKIPPED ones too), and its ``scope``: ``full`` when every check
of the catalogue was judged and every probe the SKU requires measured on every rail, else
``partial`` with what is ``missing``, each gap with its scope name (gpuboot.report.extent).
A partial certificate is a signed record, not a certification: ``verify`` and the join gate
accept it only where the node's ``gpuboot_accept_partial`` names every gap's scope. It is
about one node: ``verify`` checks the host it is presented for and, given a later bundle,
that the hardware is the one certified. Validity is capped at ``MAX_VALIDITY_DAYS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gpuboot import __version__
from gpuboot.bundle.names import is_safe_name
from gpuboot.bundle.store import read_file_capped
from gpuboot.errors import BadInput, GpubootError
from gpuboot.report import extent as X
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
from gpuboot.report.extent import FULL, PARTIAL, partial  # noqa: F401  (the certificate's API)
from gpuboot.report.fingerprint import differences, host_fingerprint, identity
from gpuboot.report.signing import (  # noqa: F401  (canonical, key_id: the certificate's API)
    ALGORITHM,
    canonical,
    key_id,
    sign,
    signature_problem,
)
from gpuboot.results import NodeReport

SCHEMA = "gpuboot.certificate/v3"  # v3: what was measured, each missing check's gap scope
DEFAULT_VALIDITY_DAYS = 30
MAX_VALIDITY_DAYS = 365  # a year: hardware and stack drift; re-certify at least that often
_MEASUREMENT_KEYS = (
    "name", "value", "unit", "median_of", "samples", "warn_below", "fail_below",
    "physical_limit", "physical_limit_source", "pct_of_limit", "margin", "expected",
    "status", "rule",
)  # fmt: skip
_SAFE_HOST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$")
_REQUIRED = (
    "schema", "host", "verdict", "rules", "issued_at", "expires_at", "evidence",
    "probes", "scope", "required", "missing", "measured",
)  # fmt: skip
_MAX_DIFFERENCES = 5  # named in a refusal; the count says how many more


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    reason: str
    certificate: dict[str, Any] | None = None
    # authentic and valid, but partial with gaps the node's policy does not accept
    refused_partial: bool = False

    def __bool__(self) -> bool:
        return self.ok


# ------------------------------------------------------------------ encoding


def render(cert: dict[str, Any]) -> bytes:
    """The file form: readable, and byte-for-byte reproducible from the parsed document."""
    text = json.dumps(cert, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


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


def eligible(node_report: NodeReport, *, allow_warn: bool = False) -> bool:
    """Only PASS nodes (and WARN ones when the policy allows) are ever certified."""
    return node_report.verdict == PASS or (allow_warn and node_report.verdict == WARN)


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
    if not isinstance(listed, dict) or not is_safe_name(host):
        raise BadInput("evidence manifest is malformed", where=str(manifest_path), hint=hint)
    # only plain "<host>/<file>" names: a listed "node1/../../x" must not be read
    host_files = {
        k: v
        for k, v in sorted(listed.items())
        if k.startswith(f"{host}/") and is_safe_name(k.removeprefix(f"{host}/"))
    }
    if not (bundle / host).is_dir() or not host_files:
        raise BadInput(f"no evidence for host {host!r} in the bundle", where=str(bundle), hint=hint)
    for name, digest in host_files.items():  # the fingerprint must come from what was hashed
        try:  # a regular file within the cap, never a link or a FIFO
            data = read_file_capped(bundle / name)
        except GpubootError as exc:
            raise BadInput(
                f"cannot read evidence file: {exc.message}", where=str(bundle / name), hint=hint
            ) from None
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


def issue(
    node_report: NodeReport,
    bundle_dir: Path | str,
    key_path: Path | str,
    *,
    validity_days: int = DEFAULT_VALIDITY_DAYS,
    allow_warn: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """A signed certificate for one node of a certify report: full, or partial when the
    run proved less than the SKU requires (it says what is missing)."""
    host = node_report.host
    if not _SAFE_HOST.match(host):
        # the host names a bundle directory and the certificate file: no path tricks
        raise BadInput(
            f"cannot certify host {host!r}: not a plain host name",
            hint="inventory host names are letters, digits, '.', '-', '_' and ':'",
        )
    if not eligible(node_report, allow_warn=allow_warn):
        raise BadInput(
            f"{host} has verdict {node_report.verdict}: no certificate is issued",
            hint="only PASS nodes (WARN with the allow-warn policy) are certified",
        )
    check_validity_days(validity_days)
    key = load_private_key(key_path)
    bundle = Path(bundle_dir)
    evidence = _evidence(bundle, host)  # first: refuses a missing or changed bundle
    names = [k.partition("/")[2] for k in evidence["host_files"]]
    assessed = X.assess(node_report, bundle / host, names)
    meta = X.read_meta(bundle / host)
    findings = sorted(node_report.findings, key=lambda f: f.rule)
    level = meta.get("probes")
    issued = (now or utc_now()).replace(microsecond=0)
    cert: dict[str, Any] = {
        "schema": SCHEMA,
        "host": host,
        "verdict": node_report.verdict,
        "profile": X.profile_name(meta),
        "probes": level if isinstance(level, str) else None,
        "scope": assessed.scope,
        "required": list(assessed.required),
        "missing": [g.to_dict() for g in assessed.gaps],
        "measured": dict(assessed.measured),
        "rules": [
            {k: getattr(f, k) for k in ("rule", "title", "status", "reason")} for f in findings
        ],
        "measurements": [
            {k: m[k] for k in _MEASUREMENT_KEYS if k in m} for m in node_report.measurements
        ],
        "fingerprint": host_fingerprint(bundle / host),
        "evidence": evidence,
        "issued_at": iso(issued),
        "expires_at": iso(issued + timedelta(days=validity_days)),
        "issuer": {"tool": "gpuboot", "version": __version__},
    }
    try:
        cert["signature"] = sign(cert, key)
    except ValueError as exc:  # NaN/inf in a measurement: not representable in JSON
        raise BadInput(f"{host}: report holds a value JSON cannot carry ({exc})") from exc
    return cert


def check_validity_days(days: Any) -> int:
    """A validity the CLI and issue accept: whole days, 1..MAX_VALIDITY_DAYS."""
    if isinstance(days, bool) or not isinstance(days, int) or not 0 < days <= MAX_VALIDITY_DAYS:
        raise BadInput(
            f"certificate validity must be 1 to {MAX_VALIDITY_DAYS} days, not {days!r}",
            where="--cert-validity-days",
            hint=f"the default is {DEFAULT_VALIDITY_DAYS}; re-certify rather than certify for long",
        )
    return days


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


def _authentic(doc: dict[str, Any], public_key: Ed25519PublicKey) -> str | None:
    """Why the document is not a certificate this key signed; None when it is."""
    if doc.get("schema") != SCHEMA:
        return f"unknown schema {doc.get('schema')!r} (expected {SCHEMA}): certify the node again"
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        return f"malformed certificate: missing {', '.join(missing)}"
    if problem := signature_problem(doc, public_key):
        return {
            "unsigned": "certificate is unsigned",
            "signature does not match the content": (
                "signature does not match the certificate's content"
            ),
        }.get(problem, problem)
    if doc.get("verdict") not in (PASS, WARN) or any(
        r.get("status") in (FAIL, ERROR) for r in doc.get("rules", [])
    ):  # a correctly signed FAIL would be a signing bug; never honour it
        return f"certificate carries verdict {doc.get('verdict')}"
    return None


def _period(doc: dict[str, Any], at: datetime) -> str | None:
    """Why the certificate is not valid at ``at``: not yet, expired, or issued for longer
    than the maximum (a key holder's typo or a forged policy must not last for years)."""
    try:
        issued, expires = parse_iso(doc["issued_at"]), parse_iso(doc["expires_at"])
    except (TypeError, ValueError):
        return "malformed certificate: issued_at/expires_at are not UTC times"
    days = (expires - issued) / timedelta(days=1)
    if days > MAX_VALIDITY_DAYS:
        return f"validity period of {days:g} days exceeds the maximum of {MAX_VALIDITY_DAYS} days"
    if at < issued:
        return f"certificate is not valid before {doc['issued_at']}"
    if at >= expires:
        return f"certificate expired at {doc['expires_at']}"
    return None


def _same_hardware(doc: dict[str, Any], bundle: Path, public_key: Any) -> str | None:
    """Why the host's evidence in ``bundle`` is not the hardware the certificate names.
    Only the files MANIFEST.json lists speak for the node (an added file is no evidence);
    a sealed manifest must be sealed with the certificate's key and bind the host."""
    from gpuboot.report.seal import seal_problem, seal_state

    host = str(doc["host"])
    # refuses a bundle without the host or changed since its run
    listed = _evidence(bundle, host)["host_files"]
    if seal_state(bundle).startswith("signed") and (
        problem := seal_problem(bundle, public_key, host)
    ):
        return problem
    observed = host_fingerprint(bundle / host, [n.removeprefix(f"{host}/") for n in listed])
    if not identity(observed):
        return f"bundle {bundle} holds no hardware evidence of {host} to compare"
    diffs = differences(doc.get("fingerprint") or {}, observed)
    if not diffs:
        return None
    more = len(diffs) - _MAX_DIFFERENCES
    shown = "; ".join(diffs[:_MAX_DIFFERENCES]) + (f"; and {more} more" if more > 0 else "")
    return f"hardware differs from the certified {host} (bundle {bundle}): {shown}"


def verify(
    cert: Path | str | bytes | dict[str, Any],
    public_key_path: Path | str,
    *,
    host: str | None,
    bundle: Path | str | None = None,
    accepts: Sequence[str] = (),
    now: datetime | None = None,
) -> VerifyResult:
    """Is ``cert`` a valid certificate of ``host``: signed with this key, within its
    validity period, about that host, full in scope or partial with only gaps ``accepts``
    names (the node's ``gpuboot_accept_partial``), and, given a ``bundle`` collected
    since, about the same hardware? Checked in that order.

    ``host=None`` checks no host: say so explicitly (a certificate is about one node).
    ``cert`` is a file path, a file's bytes, or an already parsed document (a dict skips
    the byte-exact layout check, which only a file can fail)."""
    public_key = load_public_key(public_key_path)
    doc, problem = _load(cert)
    if doc is None:
        return VerifyResult(False, problem or "malformed certificate")
    why = _authentic(doc, public_key) or _period(doc, now or utc_now())
    if why is None and host is not None and doc["host"] != host:
        why = f"certificate is for host {doc['host']!r}, not {host!r}"
    if why is None and (refused := X.refusal(doc, accepts, str(doc["host"]))):
        return VerifyResult(False, f"{refused}; it does not certify the node", doc, True)
    if why is None and bundle is not None:
        why = _same_hardware(doc, Path(bundle), public_key)
    if why is not None:
        return VerifyResult(False, why)
    extent = "" if doc["scope"] == FULL else f", partial, accepted by its policy: {partial(doc)}"
    return VerifyResult(True, f"valid until {doc['expires_at']} ({doc['host']}{extent})", doc)
