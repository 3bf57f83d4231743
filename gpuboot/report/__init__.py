"""Outputs of a certify run: signed certificates, JUnit XML, HTML report, Prometheus textfile.

Pure functions of the typed report ``gpuboot.certify.certify`` returns
(gpuboot.results.RunReport, plus the evidence bundle it names, for certificates); no host is
contacted.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gpuboot.report.extent import Extent
    from gpuboot.results import RunReport

HTML_NAME = "report.html"
JUNIT_NAME = "junit.xml"
PROM_NAME = "gpuboot.prom"
CERT_DIR = "certificates"


def write_reports(
    report: RunReport,
    out_dir: Path,
    *,
    key_path: Path | None,
    validity_days: int | None = None,
    allow_warn: bool = False,
    now: datetime | None = None,
    kind: str | None = None,
    extents: Mapping[str, Extent] | None = None,
) -> dict[str, Path]:
    """Write every output into ``out_dir``; returns name -> path.

    Keys: ``html``, ``junit``, ``prometheus`` and ``certificate:<host>`` for each node
    certified (only with ``key_path``; only PASS nodes, WARN too when ``allow_warn``).
    ``kind`` names the metric families (``prometheus.SCAN`` for a scan's report).
    ``extents``: a certify run's, host -> what was measured and whether its policy accepts
    the gaps (gpuboot.report.extent): a partial node is shown PARTIAL, never PASS.
    Certificates are issued first so the HTML and metrics can show their expiry.
    """
    # Imported here: they bring every rule and evidence parser (0.3 s), which the package's
    # light users (host_key for install, plan and status) must not pay for.
    from gpuboot.report import certificate, html, junit, prometheus

    if validity_days is None:
        validity_days = certificate.DEFAULT_VALIDITY_DAYS
    out_dir = Path(out_dir)
    paths: dict[str, Path] = {}
    certs: dict[str, dict[str, Any]] = {}
    if key_path is not None:
        if report.bundle is not None:  # sealed first: each certificate names the sealed one
            from gpuboot.report.seal import seal

            seal(Path(report.bundle), certificate.load_private_key(key_path))
        for node in report.nodes:
            if certificate.eligible(node, allow_warn=allow_warn):
                cert = certificate.issue(
                    node,
                    report.bundle,
                    key_path,
                    validity_days=validity_days,
                    allow_warn=allow_warn,
                    now=now,
                )
                certs[node.host] = cert
                paths[f"certificate:{node.host}"] = certificate.write(
                    cert, out_dir / CERT_DIR / f"{node.host}.json"
                )
    paths["html"] = html.write(report, out_dir / HTML_NAME, certs, now=now, extents=extents)
    paths["junit"] = junit.write(report, out_dir / JUNIT_NAME, extents=extents)
    paths["prometheus"] = prometheus.write(
        report,
        out_dir / PROM_NAME,
        certs,
        now=now,
        kind=kind or prometheus.CERTIFY,
        extents=extents,
    )
    return paths


__all__ = ["certificate", "html", "junit", "prometheus", "write_reports"]
