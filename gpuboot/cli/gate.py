"""The Kubernetes join gate as certify and scan apply it after their run."""

from __future__ import annotations

from typing import Any


def apply(
    args,
    inv,
    report: dict[str, Any],
    *,
    allow_warn: bool = False,
    allow_partial: bool = False,
) -> tuple[list[Any], bool]:
    """Gate the report's nodes; (the actions taken, every node gated)."""
    from gpuboot.k8s import apply_gate

    actions = apply_gate(
        report,
        kubeconfig=args.kubeconfig,
        context=args.k8s_context,
        node_names=inv.k8s_node_names(),
        dry_run=args.k8s_dry_run,
        allow_warn=allow_warn,
        allow_partial=allow_partial,
    )
    return actions, not any(a.error or a.missing for a in actions)
