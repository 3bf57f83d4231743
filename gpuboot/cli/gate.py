"""The Kubernetes join gate as certify and scan apply it after their run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuboot.results import RunReport

CERTIFICATE = "certificate:"  # gpuboot.report.write_reports' name of a node's certificate


def certificates(written: Mapping[str, Path]) -> dict[str, Path]:
    """host -> the certificate file written for it."""
    return {k[len(CERTIFICATE) :]: p for k, p in written.items() if k.startswith(CERTIFICATE)}


def apply(
    args,
    inv,
    report: RunReport,
    written: Mapping[str, Path],
    *,
    allow_warn: bool = False,
    allow_partial: bool = False,
) -> tuple[list[Any], bool]:
    """Gate the report's nodes; (the actions taken, every node gated)."""
    from gpuboot.k8s import apply_gate

    actions = apply_gate(
        report,
        certificates=certificates(written),
        kubeconfig=args.kubeconfig,
        context=args.k8s_context,
        node_names=inv.k8s_node_names(),
        dry_run=args.k8s_dry_run,
        allow_warn=allow_warn,
        allow_partial=allow_partial,
    )
    return actions, not any(a.error or a.missing for a in actions)
