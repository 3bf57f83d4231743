"""The Kubernetes join gate as certify and scan apply it after their run, and the
disruption budget every verb that takes nodes out reads from its options."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuboot.k8s.budget import Limits
    from gpuboot.results import RunReport

CERTIFICATE = "certificate:"  # gpuboot.report.write_reports' name of a node's certificate


def certificates(written: Mapping[str, Path]) -> dict[str, Path]:
    """host -> the certificate file written for it."""
    return {k[len(CERTIFICATE) :]: p for k, p in written.items() if k.startswith(CERTIFICATE)}


def limits_from(args) -> Limits:
    """The disruption budget options.k8s parsed; how they combine is checked here (bad
    input, exit 2): call it before any host is touched."""
    from gpuboot.k8s.budget import DEDICATED_TAINTS, Limits

    return Limits(
        max_unavailable=args.max_unavailable,
        per_domain=args.max_unavailable_per_domain,
        domain_label=args.domain_label,
        pool_label=args.pool_label,
        max_new=args.max_new_takeouts,
        window_s=args.takeout_window,
        ignore_taints=tuple(dict.fromkeys([*DEDICATED_TAINTS, *(args.ignore_taint or ())])),
    )


def apply(
    args,
    inv,
    report: RunReport,
    written: Mapping[str, Path],
    *,
    allow_warn: bool = False,
    hold: Mapping[str, str] | None = None,
) -> tuple[list[Any], bool]:
    """Gate the report's nodes; (the actions taken, every node gated). ``hold``: host ->
    why it must not be taken out (the breaker): flagged noncompliant instead. A node held
    back is gated: holding it is the gate's decision, not a failure. A partial certificate
    lifts a taint only where the node's gpuboot_accept_partial accepts its gaps."""
    from gpuboot.k8s import apply_gate
    from gpuboot.report.extent import policies

    actions = apply_gate(
        report,
        certificates=certificates(written),
        kubeconfig=args.kubeconfig,
        context=args.k8s_context,
        node_names=inv.k8s_node_names(),
        dry_run=args.k8s_dry_run,
        allow_warn=allow_warn,
        accept_partial=policies(inv),
        hold=hold,
        limits=limits_from(args),
        cooldown_s=args.cooldown,
    )
    return actions, not any(a.error or a.missing for a in actions)
