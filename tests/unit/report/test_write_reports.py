"""write_reports: every output in one directory, certificates only for eligible nodes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from gpuboot.report import certificate, write_reports
from gpuboot.results import RunReport

from .conftest import NOW


def test_all_outputs_with_key(report, key, tmp_path):
    out = tmp_path / "out"
    paths = write_reports(RunReport.from_dict(report), out, key_path=key, now=NOW)
    assert paths["html"] == out / "report.html"
    assert paths["junit"] == out / "junit.xml"
    assert paths["prometheus"] == out / "gpuboot.prom"
    certs = {k.split(":", 1)[1]: p for k, p in paths.items() if k.startswith("certificate:")}
    assert sorted(certs) == ["gpu-a01", "gpu-a02"]  # WARN/FAIL/ERROR: none
    assert certs["gpu-a01"] == out / "certificates" / "gpu-a01.json"
    pub = key.with_name(key.name + ".pub")
    for host, path in certs.items():
        # the sample runs 6 of the catalogue's rules: authentic, but partial in scope
        refused = certificate.verify(path, pub, host=host, now=NOW)
        assert not refused.ok and refused.refused_partial, refused.reason
    assert "0 of 5 nodes certified, 2 partial" in paths["html"].read_text()
    prom = paths["prometheus"].read_text()
    assert 'gpuboot_certify_certificate_expiry_timestamp_seconds{host="gpu-a02"}' in prom
    assert 'gpuboot_certify_node_certified{host="gpu-a02"} 0' in prom  # partial: not certified
    ET.parse(paths["junit"])
    assert all(p.exists() for p in paths.values())


def test_allow_warn_certifies_warn_nodes(report, key, tmp_path):
    paths = write_reports(
        RunReport.from_dict(report), tmp_path, key_path=key, allow_warn=True, now=NOW
    )
    cert = json.loads(paths["certificate:gpu-a03"].read_text())
    assert cert["verdict"] == "WARN"
    assert "certificate:gpu-b07.rack2.example.net" not in paths


def test_without_key_no_certificates(report, tmp_path):
    paths = write_reports(RunReport.from_dict(report), tmp_path, key_path=None, now=NOW)
    assert set(paths) == {"html", "junit", "prometheus"}
    assert not (tmp_path / "certificates").exists()
    assert 'gpuboot_certify_node_certified{host="gpu-a01"} 0' in paths["prometheus"].read_text()
