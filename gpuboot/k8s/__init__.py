"""The Kubernetes join gate (optional extra ``k8s``): see gpuboot.k8s.gate."""

from __future__ import annotations

from gpuboot.k8s.gate import GateAction, apply_gate

__all__ = ["GateAction", "apply_gate"]
