"""The RDMA-for-pods variables of a host, checked before any host is touched: the CNI mode,
the VF count, RDMA CM's DSCP (inside the lossless class), the MTU and the configfs root each
refused with the file, host and key, the rule broken and the fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpuboot.errors import ConfigError

CNI_MODES = ("none", "sriov", "shared")
# The PCI SR-IOV capability counts VFs per PF in 16 bits, but no NIC a profile names offers
# more than 256 per PF; a profile's nics[].max_vfs (its firmware's NUM_OF_VFS limit) is tighter.
MAX_VFS = 256
MTU_RANGE = (1280, 9978)  # IPv6's minimum (RoCE v2 over IPv6) .. mlx5's largest
_PATH = re.compile(r"^/[A-Za-z0-9_./-]*$")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_rdma_vars(path: Path | str, host: str, hostvars: dict[str, Any], profile: dict) -> None:
    """ConfigError (exit 2) for the first RDMA-for-pods variable of ``host`` that breaks its
    rule; nothing when the host does not prepare pod RDMA beyond a valid default."""

    def refuse(key: str, value: Any, rule: str, fix: str) -> ConfigError:
        return ConfigError(f"{key} {value!r}: {rule}", where=f"{path}: {host}.{key}", hint=fix)

    configfs = hostvars.get("gpuboot_configfs", "/sys/kernel/config")
    if not (isinstance(configfs, str) and _PATH.match(configfs) and ".." not in configfs):
        raise refuse(
            "gpuboot_configfs",
            configfs,
            "must be an absolute path of letters, digits and _ . / - (it reaches the node's shell)",
            "set gpuboot_configfs: /sys/kernel/config, or remove it for that default",
        )
    cni = hostvars.get("gpuboot_rdma_cni", "none")
    if cni not in CNI_MODES:
        raise refuse(
            "gpuboot_rdma_cni",
            cni,
            f"must be one of {', '.join(CNI_MODES)}",
            "set gpuboot_rdma_cni: sriov (VFs moved into pods), shared (the RDMA shared device "
            "plugin, macvlan/ipvlan) or none",
        )
    if cni == "none":
        return
    nics = [n for n in profile["hardware"].get("nics") or [] if n.get("link_layer") == "Ethernet"]
    if not nics:
        raise refuse(
            "gpuboot_rdma_cni",
            cni,
            f"profile {hostvars.get('gpuboot_profile')} has no RoCE (Ethernet) rail NIC",
            "set gpuboot_rdma_cni: none for this host, or a profile with RoCE rails",
        )
    if cni == "sriov":
        _check_vfs(hostvars, nics, refuse)
    _check_dscp(hostvars, refuse)
    mtu = hostvars.get("gpuboot_rdma_mtu", 9000)
    if _int(mtu) is None or not MTU_RANGE[0] <= mtu <= MTU_RANGE[1]:
        raise refuse(
            "gpuboot_rdma_mtu",
            mtu,
            f"must be a whole number of bytes from {MTU_RANGE[0]} to {MTU_RANGE[1]}",
            "set gpuboot_rdma_mtu: 9000 (the switch ports' MTU must allow it too)",
        )


def _check_vfs(hostvars: dict[str, Any], nics: list[dict], refuse) -> None:
    vfs = hostvars.get("gpuboot_rdma_vfs")
    limits = [int(n["max_vfs"]) for n in nics if _int(n.get("max_vfs")) is not None]
    most = min(limits) if limits else MAX_VFS
    if _int(vfs) is None or not 1 <= vfs <= most:
        why = "the profile's nics[].max_vfs" if limits else "VFs per PF"
        raise refuse(
            "gpuboot_rdma_vfs",
            vfs,
            f"gpuboot_rdma_cni sriov needs VFs per rail PF: a whole number from 1 to {most} "
            f"({why})",
            f"set gpuboot_rdma_vfs: 8 (at most {most}), or gpuboot_rdma_cni: shared",
        )


def _check_dscp(hostvars: dict[str, Any], refuse) -> None:
    dscp = hostvars.get("gpuboot_rdma_cm_dscp", 26)
    if _int(dscp) is None or not 0 <= dscp <= 63:
        raise refuse(
            "gpuboot_rdma_cm_dscp",
            dscp,
            "must be a DSCP: a whole number from 0 to 63",
            "set gpuboot_rdma_cm_dscp: 26 (priority 3 under trust dscp)",
        )
    prios = hostvars.get("gpuboot_roce_pfc_priorities", [3])
    lossless = sorted(p for p in prios if _int(p) is not None) if isinstance(prios, list) else []
    if dscp >> 3 not in lossless:
        want = lossless[0] if lossless else 3
        raise refuse(
            "gpuboot_rdma_cm_dscp",
            dscp,
            f"its priority under trust dscp ({dscp} >> 3 = {dscp >> 3}) is not one of "
            f"gpuboot_roce_pfc_priorities {lossless}: RDMA CM traffic would leave outside the "
            "lossless class",
            f"set gpuboot_rdma_cm_dscp: {want * 8 + 2} (priority {want}), or add priority "
            f"{dscp >> 3} to gpuboot_roce_pfc_priorities",
        )
