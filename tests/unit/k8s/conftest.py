"""Fixtures for the join-gate tests: a fake API server, a kubeconfig for it, and certify
reports whose PASS nodes carry real signed certificates (gpuboot.report.certificate)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuboot.checks.rules import RULES
from gpuboot.cli.gate import certificates
from gpuboot.report import certificate
from gpuboot.results import NodeReport, RunReport
from gpuboot_lab.kubeapi import FakeApiServer

ISSUED = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
NOW = ISSUED + timedelta(hours=1)  # when the gate runs
EXPIRES = ISSUED + timedelta(days=certificate.DEFAULT_VALIDITY_DAYS)


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert not server.crashes, f"the fake API server itself failed: {server.crashes}"


@pytest.fixture
def kubeconfig(apiserver: FakeApiServer, tmp_path: Path) -> str:
    return str(apiserver.write_kubeconfig(tmp_path / "kubeconfig"))


def finding(rule: str, status: str) -> dict[str, Any]:
    return {"rule": rule, "title": rule, "status": status, "reason": "r", "action": "a"}


def with_catalogue(given: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``given`` plus a PASS for every other rule: a whole run, so a PASS node's
    certificate is full in scope (the gate refuses partial ones)."""
    named = {f["rule"] for f in given}
    return given + [finding(r.id, "PASS") for r in RULES if r.id not in named]


class Reports:
    """Builds certify reports: a bundle per run, certificates for the PASS/WARN nodes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.key = certificate.generate_key(root / "key.pem")

    def make(
        self,
        nodes: dict[str, str],
        *,
        findings: dict[str, list[dict[str, Any]]] | None = None,
        pins: dict[str, dict[str, Any]] | None = None,
        certify: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """``nodes`` host -> verdict; certificates for ``certify`` (default: PASS hosts)."""
        bundle = self.root / f"bundle-{len(list(self.root.glob('bundle-*')))}"
        files = {}
        for host in nodes:
            meta = {
                "host": host,
                "profile": "hgx-h100-sxm-8gpu",
                "probes": "quick",
                "pins": (pins or {}).get(host, {}),
            }
            (bundle / host).mkdir(parents=True)
            data = json.dumps(meta).encode()
            (bundle / host / "meta.json").write_bytes(data)
            files[f"{host}/meta.json"] = hashlib.sha256(data).hexdigest()
            for rail in range(8):  # every rail measured: the certificate can be full
                name = f"ib_write_bw_-d_mlx5_{rail}_peer.txt"
                (bundle / host / name).write_bytes(b"measured\n")
                files[f"{host}/{name}"] = hashlib.sha256(b"measured\n").hexdigest()
        manifest = {"run_id": bundle.name, "hosts": nodes, "files": files}
        (bundle / "MANIFEST.json").write_text(json.dumps(manifest))
        report: dict[str, Any] = {
            "run_id": bundle.name,
            "bundle": str(bundle),
            "passed": all(v == "PASS" for v in nodes.values()),
            "nodes": [
                {"host": h, "verdict": v, "findings": with_catalogue((findings or {}).get(h, []))}
                for h, v in nodes.items()
            ],
            "reports": {},
        }
        chosen = certify if certify is not None else [h for h, v in nodes.items() if v == "PASS"]
        for node in report["nodes"]:
            if node["host"] in chosen:
                cert = certificate.issue(
                    NodeReport.from_dict(node), bundle, self.key, allow_warn=True, now=ISSUED
                )
                path = certificate.write(
                    cert, bundle.parent / f"{bundle.name}-certs" / f"{node['host']}.json"
                )
                report["reports"][f"certificate:{node['host']}"] = str(path)
        return report


def gate_args(report: dict[str, Any]) -> tuple[RunReport, dict[str, Path]]:
    """A report as the gate takes it: the typed run and its certificate files by host."""
    return RunReport.from_dict(report), certificates(
        {k: Path(v) for k, v in report.get("reports", {}).items()}
    )


@pytest.fixture
def reports(tmp_path: Path) -> Reports:
    return Reports(tmp_path / "runs")
