"""The Kubernetes join gate (optional extra ``k8s``): see gpuboot.k8s.gate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuboot.k8s.gate import GateAction, apply_gate

__all__ = ["GateAction", "apply_gate"]


def __getattr__(name: str) -> Any:
    # loaded on first use: a small module of the package (labels, the budget's defaults,
    # which every CLI start reads) must not pull in the gate's certificate checks
    if name in __all__:
        from gpuboot.k8s import gate

        return getattr(gate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
