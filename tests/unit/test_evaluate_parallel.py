"""A large bundle is judged on every core: the report must be the one a single process
gives, host for host, and a host whose evidence was changed is still caught."""

from __future__ import annotations

import shutil

import pytest

from gpuboot import certify
from gpuboot.bundle.manifest import write_manifest
from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FIXTURES = REPO / "tests" / "fixtures" / "bundles"
SOURCES = ["real-h100-healthy", "real-xid", "real-nvlink", "real-pcie-ecc"]


@pytest.fixture()
def fleet_bundle(tmp_path):
    """80 hosts (copies of real capture bundles), a MANIFEST, one host tampered with."""
    hosts = []
    for source in SOURCES:
        hosts += [p for p in sorted((FIXTURES / source).iterdir()) if p.is_dir()]
    root = tmp_path / "bundle"
    for i in range(80):
        shutil.copytree(hosts[i % len(hosts)], root / f"node{i}")
    write_manifest(root, "fleet", {})
    meta = root / "node7" / "meta.json"
    meta.write_text(meta.read_text() + " ")  # changed after the run: must be ERROR
    return root


def test_parallel_judging_gives_the_single_process_report(fleet_bundle, monkeypatch):
    parallel = certify.evaluate_bundle(str(fleet_bundle)).to_dict()
    monkeypatch.setattr(certify, "PARALLEL_FROM_HOSTS", 10**9)
    single = certify.evaluate_bundle(str(fleet_bundle)).to_dict()
    assert parallel == single
    node7 = next(n for n in parallel["nodes"] if n["host"] == "node7")
    assert node7["verdict"] == "ERROR"
    assert "changed" in node7["findings"][0]["reason"]
    assert {n["verdict"] for n in parallel["nodes"]} - {"ERROR"}  # the others were judged
