"""evaluate reads each shipped profile once per run and shares it between hosts (a deep
copy per host was a third of evaluate's time); sharing is only safe while judging never
changes the profile, which the second test guards."""

from __future__ import annotations

import shutil

import pytest

from gpuboot import certify, profiles
from gpuboot.bundle import profile as bundle_profile
from gpuboot.bundle.manifest import write_manifest
from gpuboot.bundle.profile import SHIPPED
from tests.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "bundles"


@pytest.fixture()
def bundle(tmp_path):
    hosts = [
        p
        for source in ("real-h100-healthy", "real-xid", "real-nvlink", "real-bandwidth")
        for p in sorted((FIXTURES / source).iterdir())
        if p.is_dir()
    ]
    root = tmp_path / "bundle"
    for i in range(24):
        shutil.copytree(hosts[i % len(hosts)], root / f"node{i}")
    write_manifest(root, "shared", {})
    return root


def test_each_shipped_profile_is_loaded_once_per_run(bundle, monkeypatch):
    calls: list[str] = []
    real = bundle_profile.load_profile

    def counting(name):
        calls.append(str(name))
        return real(name)

    monkeypatch.setattr(bundle_profile, "load_profile", counting)
    report = certify.evaluate_bundle(str(bundle)).to_dict()
    assert len(report["nodes"]) == 24
    assert calls, "the bundle names shipped profiles"
    assert len(calls) == len(set(calls)), f"a profile loaded more than once: {calls}"


def test_judging_leaves_the_shared_profile_unchanged(bundle, monkeypatch):
    monkeypatch.setattr(certify, "PARALLEL_FROM_HOSTS", 10**9)  # same process: see SHIPPED
    certify.evaluate_bundle(str(bundle)).to_dict()
    assert SHIPPED
    for name, shared in SHIPPED.items():
        assert shared == profiles.load_profile(name), f"judging changed profile {name}"
