"""Signed certificates: issue from a real-capture bundle, verify, and reject tampering."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from gpuboot.checks.rules import RULES
from gpuboot.errors import BadInput
from gpuboot.report import certificate
from gpuboot.results import NodeReport

from .conftest import NOW
from .sample import CAPTURES, make_bundle

# The verify calls here check authenticity and the validity period of certificates full in
# scope: the sample's nodes judged on every rule (test_cert_scope.py covers scope, host and
# hardware).
ANY = {"host": "gpu-a01"}


def _node(report: dict, host: str) -> dict:
    """The sample's node with a PASS finding for each catalogue rule the sample leaves out."""
    node = next(n for n in report["nodes"] if n["host"] == host)
    judged = {f["rule"] for f in node["findings"]}
    rest = [
        {"rule": r.id, "title": r.title, "status": "PASS", "reason": "ok"}
        for r in RULES
        if r.id not in judged
    ]
    return {**node, "findings": [*node["findings"], *rest]}


@pytest.fixture
def cert(report, bundle, key) -> dict:
    return certificate.issue(NodeReport.from_dict(_node(report, "gpu-a01")), bundle, key, now=NOW)


def test_generate_key_private_is_0600_and_pub_is_loadable(key: Path):
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    pub = key.with_name(key.name + ".pub")
    loaded = serialization.load_pem_public_key(pub.read_bytes())
    assert certificate.key_id(loaded) == certificate.key_id(
        certificate.load_private_key(key).public_key()
    )


def test_generate_key_refuses_to_overwrite(key: Path):
    with pytest.raises(BadInput, match="overwrite"):
        certificate.generate_key(key)


def test_certificate_content(cert: dict, bundle: Path):
    assert cert["schema"] == "gpuboot.certificate/v3"
    assert cert["host"] == "gpu-a01" and cert["verdict"] == "PASS"
    assert cert["profile"] == "hgx-h100-sxm-8gpu"
    assert (cert["scope"], cert["missing"]) == ("full", [])
    rails = [f"mlx5_{i}" for i in range(8)]  # the sample measures every rail with gpu-b01
    assert cert["measured"] == {
        "probes": "quick",
        "repeats": 0,  # the sample keeps no nvbandwidth run files
        "dcgm_diag_level": None,
        "gpus": {"measured": 8, "profile": 8},
        "rails": {"measured": rails, "profile": rails},
        "pairs": {"tcp_bw": [], "ib_write_bw": ["gpu-b01"]},
    }
    assert cert["issued_at"] == "2026-11-22T10:20:00Z"
    assert cert["expires_at"] == "2026-12-22T10:20:00Z"  # 30 days by default
    assert [r["rule"] for r in cert["rules"]] == sorted(r["rule"] for r in cert["rules"])
    assert {r["status"] for r in cert["rules"]} == {"PASS"}
    assert cert["measurements"][0]["name"].startswith("nvbandwidth")
    assert cert["measurements"][0]["physical_limit"] == 63.0
    # Evidence binding: the manifest digest and the host's files as the manifest lists them.
    manifest = (bundle / "MANIFEST.json").read_bytes()
    assert cert["evidence"]["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert "gpu-a01/nvidia-smi_-q.txt" in cert["evidence"]["host_files"]
    assert not any(k.startswith("gpu-a02/") for k in cert["evidence"]["host_files"])
    sig = cert["signature"]
    assert sig["algorithm"] == "Ed25519" and sig["key_id"].startswith("sha256:")
    assert len(base64.b64decode(sig["value"])) == 64


def test_fingerprint_from_real_captures(cert: dict):
    fp = cert["fingerprint"]
    gpus = fp["gpus"]
    assert len(gpus) == 8
    assert all(g["serial"] and g["vbios"] and g["uuid"].startswith("GPU-") for g in gpus)
    assert gpus[0]["pci_bus_id"].endswith(":00.0")
    assert gpus[0]["pcie_link"]["gen_max"] == 5 and gpus[0]["pcie_link"]["width_max"] == 16
    assert fp["driver"]["kernel_module_version"] == "570.133.20"
    assert fp["driver"]["kernel_module_flavor"] == "open"
    assert fp["driver"]["driver_version"]  # from nvidia-smi -q
    nics = fp["nics"]
    assert any(n["ca_type"] == "MT4129" and n["firmware"] for n in nics)  # ConnectX-7
    assert fp["pcie_topology"]["links"]["GPU0"]["GPU1"] == "NV18"
    stack = fp["stack"]["packages"]
    assert stack["nvidia-driver-570-open"] == "570.133.20-1"
    assert stack["linux-image-6.8.0-60-generic"] == "6.8.0-60.63"
    assert "bash" not in stack and "nvidia-old-removed" not in stack  # not stack / not installed
    assert fp["stack"]["package_count"] == 7
    assert "unreadable" not in fp


def test_fingerprint_from_query_csv(report, tmp_path, key):
    csv = "nvidia_smi_query_csv/h100-hbm3-idle-fullfields.csv.txt"
    assert (CAPTURES / csv).is_file()
    bundle = make_bundle(
        tmp_path / "csv", ["gpu-a01"], probes={"nvidia-smi_--query-gpu_--format=csv.csv": csv}
    )
    gpus = certificate.issue(NodeReport.from_dict(_node(report, "gpu-a01")), bundle, key, now=NOW)[
        "fingerprint"
    ]["gpus"]
    assert len(gpus) == 1
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3" and gpus[0]["vbios"]
    assert gpus[0]["pcie_link"]["gen_max"] == 5


def test_unreadable_probe_is_listed_not_guessed(report, bundle, key):
    (bundle / "gpu-a01" / "ibstat.txt").write_text("garbage that is not ibstat\n")
    # keep the manifest consistent so only the parser, not the digest check, objects
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    manifest["files"]["gpu-a01/ibstat.txt"] = hashlib.sha256(
        (bundle / "gpu-a01" / "ibstat.txt").read_bytes()
    ).hexdigest()
    (bundle / "MANIFEST.json").write_text(json.dumps(manifest))
    cert = certificate.issue(NodeReport.from_dict(_node(report, "gpu-a01")), bundle, key, now=NOW)
    assert "nics" not in cert["fingerprint"]
    assert "ibstat.txt" in cert["fingerprint"]["unreadable"]


def test_verify_ok_and_validity_days(report, bundle, key, tmp_path):
    cert = certificate.issue(
        NodeReport.from_dict(_node(report, "gpu-a01")), bundle, key, validity_days=7, now=NOW
    )
    path = certificate.write(cert, tmp_path / "gpu-a01.json")
    pub = key.with_name(key.name + ".pub")
    result = certificate.verify(path, pub, **ANY, now=NOW + timedelta(days=6))
    assert result.ok, result.reason
    assert result.certificate["host"] == "gpu-a01"
    assert certificate.verify(cert, pub, **ANY, now=NOW).ok  # a dict verifies as well
    assert certificate.verify(path, key, **ANY, now=NOW).ok  # the private key file also serves


def test_one_byte_altered_anywhere_in_the_file_fails(report, key, tmp_path):
    # Every byte of a whole certificate, flipped one at a time (a small bundle keeps it fast).
    small = make_bundle(tmp_path / "small", ["gpu-a01"], probes={})
    node = {
        **_node(report, "gpu-a01"),
        "measurements": _node(report, "gpu-a01")["measurements"][:1],
    }
    cert = certificate.issue(NodeReport.from_dict(node), small, key, now=NOW)
    path = certificate.write(cert, tmp_path / "c.json")
    pub = key.with_name(key.name + ".pub")
    data = path.read_bytes()
    assert cert["missing"][0]["gap"] == "quick-probes"  # no rail file: accepted here
    ANY = {"host": "gpu-a01", "accepts": ("quick-probes",)}
    assert certificate.verify(path, pub, **ANY, now=NOW).ok

    def flipped(i: int) -> bytes:
        changed = bytearray(data)
        changed[i] ^= 0x01
        return bytes(changed)

    # All offsets through the file's bytes (verify reads a path into exactly these)...
    passed = [i for i in range(len(data)) if certificate.verify(flipped(i), pub, **ANY, now=NOW).ok]
    assert passed == []
    # ...and a spread of offsets through real files on disk.
    tampered = tmp_path / "t.json"
    for i in range(0, len(data), max(1, len(data) // 40)):
        tampered.write_bytes(flipped(i))
        assert not certificate.verify(tampered, pub, **ANY, now=NOW).ok, f"byte {i}"


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        (b'"serial": "165', b'"serial": "265', "signature does not match"),  # content
        (b'"verdict": "PASS"', b'"verdict":  "PASS"', "altered"),  # whitespace only
        (b'"schema": "gpuboot.certificate/v3"', b'"schema": "gpuboot.certificate/v4"', "schema"),
    ],
)
def test_single_edits_give_clear_reasons(cert, key, tmp_path, old, new, why):
    path = certificate.write(cert, tmp_path / "c.json")
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))
    # a re-rendered (well-formed) edit must be caught by the signature, not the layout check
    if why != "altered":
        doc = json.loads(path.read_bytes())
        certificate.write(doc, path)
    result = certificate.verify(path, key.with_name(key.name + ".pub"), **ANY, now=NOW)
    assert not result.ok and why in result.reason


def test_expired_and_not_yet_valid(cert, key):
    pub = key.with_name(key.name + ".pub")
    expired = certificate.verify(cert, pub, **ANY, now=NOW + timedelta(days=30))
    assert not expired.ok and "expired at 2026-12-22T10:20:00Z" in expired.reason
    early = certificate.verify(cert, pub, **ANY, now=NOW - timedelta(seconds=1))
    assert not early.ok and "not valid before" in early.reason


def test_wrong_key(cert, tmp_path):
    other = certificate.generate_key(tmp_path / "other.pem")
    result = certificate.verify(cert, other.with_name("other.pem.pub"), **ANY, now=NOW)
    assert not result.ok and "not by the given key" in result.reason


def test_forged_key_id_still_fails_the_signature(cert, tmp_path):
    other = certificate.generate_key(tmp_path / "other.pem")
    pub = certificate.load_public_key(other.with_name("other.pem.pub"))
    forged = {**cert, "signature": {**cert["signature"], "key_id": certificate.key_id(pub)}}
    result = certificate.verify(forged, other.with_name("other.pem.pub"), **ANY, now=NOW)
    assert not result.ok and "signature does not match" in result.reason


def test_unsigned(cert, key, tmp_path):
    unsigned = {k: v for k, v in cert.items() if k != "signature"}
    path = certificate.write(unsigned, tmp_path / "u.json")
    result = certificate.verify(path, key.with_name(key.name + ".pub"), **ANY, now=NOW)
    assert not result.ok and result.reason == "certificate is unsigned"


def test_malformed_json(key, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"schema": "gpuboot.certificate/v1", ')
    result = certificate.verify(path, key.with_name(key.name + ".pub"), **ANY, now=NOW)
    assert not result.ok and "invalid JSON" in result.reason
    path.write_text("[1, 2]\n")
    result = certificate.verify(path, key.with_name(key.name + ".pub"), **ANY, now=NOW)
    assert not result.ok and "not an object" in result.reason


def test_unreadable_files_raise_bad_input_with_name_and_hint(key, tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(BadInput) as info:
        certificate.verify(missing, key.with_name(key.name + ".pub"), **ANY)
    assert info.value.where == str(missing) and info.value.hint
    with pytest.raises(BadInput) as info:
        certificate.verify({}, tmp_path / "no-key.pub", **ANY)
    assert "no-key.pub" in str(info.value) and info.value.hint
    not_a_key = tmp_path / "junk.pub"
    not_a_key.write_text("hello\n")
    with pytest.raises(BadInput, match="not a PEM public key"):
        certificate.verify({}, not_a_key, **ANY)


@pytest.mark.parametrize("host", ["gpu-b07.rack2.example.net", "gpu-c11"])
def test_fail_and_error_nodes_are_never_certified(report, bundle, key, host):
    with pytest.raises(BadInput, match="no certificate"):
        certificate.issue(NodeReport.from_dict(_node(report, host)), bundle, key, now=NOW)
    with pytest.raises(BadInput, match="no certificate"):
        certificate.issue(
            NodeReport.from_dict(_node(report, host)), bundle, key, allow_warn=True, now=NOW
        )


def test_warn_needs_the_policy(report, bundle, key):
    node = _node(report, "gpu-a03")
    with pytest.raises(BadInput):
        certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    cert = certificate.issue(NodeReport.from_dict(node), bundle, key, allow_warn=True, now=NOW)
    assert cert["verdict"] == "WARN"
    assert certificate.verify(cert, key.with_name(key.name + ".pub"), host="gpu-a03", now=NOW).ok


def test_signed_fail_certificate_is_rejected(cert, key):
    # Even a correctly signed certificate claiming FAIL must not verify.
    bad = {k: v for k, v in cert.items() if k != "signature"}
    bad["verdict"] = "FAIL"
    priv = certificate.load_private_key(key)
    bad["signature"] = {
        **cert["signature"],
        "value": base64.b64encode(priv.sign(certificate.canonical(bad))).decode(),
    }
    result = certificate.verify(bad, key.with_name(key.name + ".pub"), **ANY, now=NOW)
    assert not result.ok and "FAIL" in result.reason


def test_evidence_changed_after_manifest_is_refused(report, bundle, key):
    (bundle / "gpu-a01" / "dpkg-query_-W.txt").write_text("nvidia-driver-570-open\t999\tii \n")
    with pytest.raises(BadInput, match="changed since MANIFEST"):
        certificate.issue(NodeReport.from_dict(_node(report, "gpu-a01")), bundle, key, now=NOW)


def test_missing_manifest_or_host_is_refused(report, bundle, key):
    node = {**_node(report, "gpu-a01"), "host": "gpu-zz9"}
    with pytest.raises(BadInput, match="no evidence for host"):
        certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)
    (bundle / "MANIFEST.json").unlink()
    with pytest.raises(BadInput, match="cannot read evidence manifest"):
        certificate.issue(NodeReport.from_dict(_node(report, "gpu-a01")), bundle, key, now=NOW)


@pytest.mark.parametrize("host", ["../etc", "a/b", ".hidden", ""])
def test_path_like_host_names_are_refused(report, bundle, key, host):
    node = {**_node(report, "gpu-a01"), "host": host}
    with pytest.raises(BadInput, match="not a plain host name"):
        certificate.issue(NodeReport.from_dict(node), bundle, key, now=NOW)


def test_canonical_encoding_is_sorted_compact_utf8():
    doc = {"b": 1, "a": "ü", "signature": {"x": 1}}
    assert certificate.canonical(doc) == '{"a":"ü","b":1}'.encode()
