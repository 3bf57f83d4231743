"""Fixtures for the report tests: a real-capture bundle, a sample report, a signing key."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuboot.report import certificate

from .sample import make_bundle, sample_report

HOSTS = ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-b07.rack2.example.net", "gpu-c11"]
NOW = datetime(2026, 11, 22, 10, 20, tzinfo=UTC)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return make_bundle(tmp_path / "bundles", HOSTS)


@pytest.fixture
def report(bundle: Path) -> dict[str, Any]:
    return copy.deepcopy(sample_report(bundle))


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return certificate.generate_key(tmp_path / "keys" / "gpuboot-signing.pem")
