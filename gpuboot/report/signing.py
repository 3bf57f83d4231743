"""Ed25519 signatures over a JSON document's canonical bytes: the certificate and the
bundle's MANIFEST.json are signed the same way, with the operator's certify key."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALGORITHM = "Ed25519"


def canonical(doc: dict[str, Any]) -> bytes:
    """The signed bytes: everything but ``signature``, sorted keys, no whitespace, UTF-8."""
    body = {k: v for k, v in doc.items() if k != "signature"}
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def sign(doc: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, str]:
    """The ``signature`` block of ``doc`` (whatever signature it carries is not signed)."""
    return {
        "algorithm": ALGORITHM,
        "key_id": key_id(key.public_key()),
        "value": base64.b64encode(key.sign(canonical(doc))).decode("ascii"),
    }


def signature_problem(doc: dict[str, Any], public_key: Ed25519PublicKey) -> str | None:
    """Why ``doc`` is not signed by this key; None when it is."""
    sig = doc.get("signature")
    if not isinstance(sig, dict) or not sig.get("value"):
        return "unsigned"
    if sig.get("algorithm") != ALGORITHM:
        return f"unsupported signature algorithm {sig.get('algorithm')!r}"
    expected = key_id(public_key)
    if sig.get("key_id") != expected:
        return f"signed by key {sig.get('key_id')}, not by the given key {expected}"
    try:
        public_key.verify(base64.b64decode(sig["value"], validate=True), canonical(doc))
    except (InvalidSignature, binascii.Error, ValueError, TypeError):
        return "signature does not match the content"
    return None
