"""NVSwitch fabric: what the GPUs report depending on nv-fabricmanager (and its fault)."""

from __future__ import annotations

from . import kmod, model
from .state import Node


def fm_running(node: Node) -> bool:
    return kmod.pid_alive(node.vstate.get("fabricmanager_pid"))


def gpu_fabric_state(node: Node) -> tuple[str, str]:
    """(State, Status) of `nvidia-smi -q` "Fabric" on an NVSwitch system."""
    if model.faults_of(node, "fabricmanager-fails"):
        return ("Completed", "Failure") if fm_running(node) else ("In Progress", "N/A")
    if fm_running(node):
        return ("Completed", "Success")
    # Without fabric manager the GPUs wait for fabric registration and CUDA init fails.
    return ("In Progress", "N/A")
