"""The RDMA labels a node gets at the join gate (gpuboot.io/rdma-mode, rdma-rails,
rdma-vfs-per-rail): what Spiderpool's SpiderMultusConfig, the SR-IOV network operator's
policies and pods' node selectors pick nodes by (docs/rdma-pods.md).

Set only where the node's RDM rules all passed for its gpuboot_rdma_cni (as the run's
meta.json recorded it); removed wherever they did not (failed, not judged, not configured),
so a label never vouches for RDMA the last run did not certify."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuboot.k8s import labels as L
from gpuboot.results import NodeReport
from gpuboot.verdict import Status

_CNI_MODES = ("sriov", "shared")


def rdma_labels(node: NodeReport, pins: Mapping[str, Any]) -> dict[str, str | None]:
    """{label: value or None (remove)}: values only for a node whose RDM rules passed under
    ``pins`` (its meta.json's variables; {} for a node taken out: every label removed);
    {} where the run judged no RDM rule (nothing said about pod RDMA: left as they are)."""
    rdm = [f for f in node.findings if f.rule.startswith("RDM-")]
    if not rdm:
        return {}
    off: dict[str, str | None] = dict.fromkeys(L.RDMA_LABELS)
    mode = pins.get("gpuboot_rdma_cni")
    judged = [f for f in rdm if f.applicable]
    if mode not in _CNI_MODES or not judged or any(f.status != Status.PASS for f in judged):
        return off
    rails = _rails(pins.get("gpuboot_profile"))
    if rails is None:
        return off
    vfs = pins.get("gpuboot_rdma_vfs") if mode == "sriov" else None
    return {
        L.LABEL_RDMA_MODE: mode,
        L.LABEL_RDMA_RAILS: str(rails),
        L.LABEL_RDMA_VFS_PER_RAIL: str(vfs) if vfs is not None else None,
    }


def _rails(profile: Any) -> int | None:
    """The profile's RoCE rail NICs (the RDM rules' rails), or None where it cannot be read."""
    from gpuboot.errors import GpubootError
    from gpuboot.profiles import load_profile

    try:
        nics = load_profile(str(profile))["hardware"]["nics"]
    except (GpubootError, KeyError, TypeError):
        return None
    return sum(1 for n in nics if n.get("link_layer") == "Ethernet")
