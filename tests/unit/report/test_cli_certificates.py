"""`gpuboot certify --gen-key / --verify` through the CLI, on a certificate issued for real."""

import json
import subprocess
import sys

import pytest

from gpuboot.report import certificate
from gpuboot.results import NodeReport

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


def gpuboot(*args):
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_gen_key_issue_verify_and_one_changed_byte(tmp_path, report, bundle):
    key = tmp_path / "signing.pem"
    assert gpuboot("certify", "--gen-key", str(key)).returncode == 0
    node = next(n for n in report["nodes"] if n["verdict"] == "PASS")
    cert = certificate.write(
        certificate.issue(NodeReport.from_dict(node), bundle, key), tmp_path / "cert.json"
    )

    # the sample runs 6 of the catalogue's rules: authentic, but partial with gaps no policy
    # accepts (unproven): exit 7, not valid
    args = ("--pubkey", f"{key}.pub", "--host", node["host"])
    partial = gpuboot("certify", "--verify", str(cert), *args, "--json")
    doc = json.loads(partial.stdout)
    assert partial.returncode == 7 and doc["ok"] is False and doc["scope"] == "partial"
    assert {g["gap"] for g in doc["gaps"]} == {"unproven"}

    data = bytearray(cert.read_bytes())
    at = data.index(b'"host"') + 10
    data[at] = ord("X") if data[at] != ord("X") else ord("Y")
    cert.write_bytes(bytes(data))
    bad = gpuboot("certify", "--verify", str(cert), *args)
    assert bad.returncode == 1
    assert "INVALID" in bad.stdout


def test_verify_without_pubkey_is_bad_input(tmp_path):
    proc = gpuboot("certify", "--verify", str(tmp_path / "x.json"))
    assert proc.returncode == 2 and "--pubkey" in proc.stderr


def test_cert_verbs_do_what_the_old_certify_flags_did(tmp_path, report, bundle):
    """`cert keygen` / `cert verify` give the documents and exit codes `certify --gen-key`
    / `--verify` gave; the old spellings still work, with one deprecation line."""
    key = tmp_path / "signing.pem"
    made = gpuboot("cert", "keygen", str(key), "--json")
    assert made.returncode == 0 and made.stderr == ""
    assert json.loads(made.stdout) == {"private_key": str(key), "public_key": f"{key}.pub"}
    node = next(n for n in report["nodes"] if n["verdict"] == "PASS")
    cert = certificate.write(
        certificate.issue(NodeReport.from_dict(node), bundle, key), tmp_path / "cert.json"
    )
    args = ("--pubkey", f"{key}.pub", "--host", node["host"], "--json")

    new = gpuboot("cert", "verify", str(cert), *args)
    old = gpuboot("certify", "--verify", str(cert), *args)
    assert new.returncode == old.returncode == 7 and new.stdout == old.stdout  # partial
    assert new.stderr == ""
    (line,) = old.stderr.splitlines()
    assert "deprecated" in line and "gpuboot cert verify" in line

    old_key = gpuboot("certify", "--gen-key", str(tmp_path / "old.pem"))
    assert old_key.returncode == 0 and (tmp_path / "old.pem.pub").exists()
    (line,) = old_key.stderr.splitlines()
    assert "deprecated" in line and "gpuboot cert keygen" in line

    refused = gpuboot("cert", "verify", str(cert), "--pubkey", f"{key}.pub")
    assert refused.returncode == 2 and "--host" in refused.stderr
