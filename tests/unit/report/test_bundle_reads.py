"""Readers of a bundle outside evaluate (certificate issue/verify, the join gate's stack
label) read it as evaluate does: listed plain names only, regular files within the cap,
never through a link, never blocking on a FIFO."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from gpuboot.errors import BadInput
from gpuboot.k8s.decision import stack_of
from gpuboot.report import certificate, extent


def _bundle(tmp_path: Path, files: dict[str, bytes]) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "node1").mkdir(parents=True)
    for name, data in files.items():
        (bundle / name).write_bytes(data)
    listed = {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
    (bundle / "MANIFEST.json").write_text(json.dumps({"run_id": "r1", "files": listed}))
    return bundle


def test_a_manifest_name_climbing_out_of_the_host_is_not_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"controller secret\n")
    bundle = _bundle(tmp_path, {"node1/dmesg.txt": b"ok\n"})
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    climbing = "node1/../../secret.txt"
    manifest["files"][climbing] = hashlib.sha256(secret.read_bytes()).hexdigest()
    (bundle / "MANIFEST.json").write_text(json.dumps(manifest))
    found = certificate._evidence(bundle, "node1")
    assert climbing not in found["host_files"]
    assert list(found["host_files"]) == ["node1/dmesg.txt"]


def test_an_evidence_file_replaced_by_a_link_is_refused(tmp_path):
    data = b"Linux version 6.1\n"
    bundle = _bundle(tmp_path, {"node1/dmesg.txt": data})
    target = tmp_path / "same.txt"
    target.write_bytes(data)  # same bytes, same hash: only the link itself gives it away
    (bundle / "node1/dmesg.txt").unlink()
    (bundle / "node1/dmesg.txt").symlink_to(target)
    with pytest.raises(BadInput, match=r"dmesg\.txt"):
        certificate._evidence(bundle, "node1")


def _returns_within(fn, seconds: float = 10.0):
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked reading the bundle"
    return out[0]


def test_a_fifo_as_meta_json_never_blocks_the_gate(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "node1").mkdir(parents=True)
    os.mkfifo(bundle / "node1" / "meta.json")
    assert _returns_within(lambda: stack_of(bundle, "node1", None)) is None
    assert _returns_within(lambda: extent.read_meta(bundle / "node1")) == {}


def test_the_gate_reads_the_stack_from_a_plain_meta_json(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "node1").mkdir(parents=True)
    meta = {"pins": {"gpuboot_stack": "lts-550-cuda12.4"}}
    (bundle / "node1" / "meta.json").write_text(json.dumps(meta))
    assert stack_of(bundle, "node1", None) == "lts-550-cuda12.4"


def test_the_fingerprint_reads_no_link_of_a_host_directory(tmp_path):
    """A link planted in a host directory (not listed, so not hash-checked) is never read
    for the fingerprint: the part is listed unreadable, its target's bytes are nowhere."""
    from gpuboot.report.fingerprint import host_fingerprint

    outside = tmp_path / "driver_version"
    outside.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Thu Feb 22\n")
    host = tmp_path / "node1"
    host.mkdir()
    (host / "proc_driver_nvidia_version.txt").symlink_to(outside)
    fp = host_fingerprint(host)
    assert "driver" not in fp
    assert list(fp["unreadable"]) == ["proc_driver_nvidia_version.txt"]
