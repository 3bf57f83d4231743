"""The emulated hardware as the tools see it: profile + state + active faults -> views.

Everything here is a pure function of a Node snapshot, so every shim sees the same node.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any

from . import paths
from .state import Node

# CUDA version the driver's libcuda reports, by driver branch (NVIDIA CUDA release notes,
# "CUDA Toolkit and Corresponding Driver Versions").
CUDA_BY_BRANCH = {
    450: "11.0",
    455: "11.1",
    460: "11.2",
    465: "11.3",
    470: "11.4",
    495: "11.5",
    510: "11.6",
    515: "11.7",
    520: "11.8",
    525: "12.0",
    530: "12.1",
    535: "12.2",
    545: "12.3",
    550: "12.4",
    555: "12.5",
    560: "12.6",
    565: "12.7",
    570: "12.8",
    575: "12.9",
    580: "13.0",
    590: "13.1",
}


def cuda_version(driver: str) -> str:
    try:
        branch = int(driver.split(".")[0])
    except ValueError:
        return "N/A"
    best = "N/A"
    for b, cuda in sorted(CUDA_BY_BRANCH.items()):
        if branch >= b:
            best = cuda
    return best


@dataclass
class Gpu:
    slot: int  # position in the profile (fault arguments use it)
    index: int  # nvidia-smi index among the GPUs that enumerate
    bus_id: str  # 00000000:19:00.0
    name: str
    uuid: str
    serial: str
    module_id: int
    numa: int
    lost: bool = False
    persistence: bool = False
    pcie_gen: int = 0
    pcie_gen_max: int = 0
    pcie_width: int = 0
    pcie_width_max: int = 0
    mig_current: bool = False
    mig_pending: bool = False
    dram_uncorr_vol: int = 0
    dram_uncorr_agg: int = 0
    remap_corr: int = 0
    remap_uncorr: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    thermal: bool = False
    temp: int = 30
    mem_temp: int = 38
    power: float = 70.0
    links: list[bool] = field(default_factory=list)
    hw: dict[str, Any] = field(default_factory=dict)

    @property
    def bus4(self) -> str:
        """0000:19:00.0: the 4-digit-domain form the kernel and some messages use."""
        return self.bus_id[4:]

    @property
    def xid_bus(self) -> str:
        """PCI:0000:19:00 as in 'NVRM: Xid (PCI:0000:19:00)' (lower-case, no function)."""
        return "PCI:" + self.bus_id[4:-2].lower()


def hw(node: Node) -> dict[str, Any]:
    return node.profile["hardware"]


def gpu_hw(node: Node) -> dict[str, Any]:
    return hw(node)["gpu"]


def bus_ids(node: Node) -> list[str]:
    g = gpu_hw(node)
    ids = g.get("pci_bus_ids")
    if ids:
        return [str(b).upper() for b in ids][: int(g["count"])]
    # Fallback layout: one GPU per root port, 0x18 apart.
    return [f"00000000:{0x18 + 0x20 * i:02X}:00.0" for i in range(int(g["count"]))]


def faults_of(node: Node, kind: str) -> list[dict[str, Any]]:
    return [f for f in node.faults if f["kind"] == kind]


def _gpu_arg(fault: dict[str, Any], pos: int = 0, default: int | None = 0) -> int | None:
    args = fault.get("args", [])
    if len(args) > pos:
        return int(args[pos])
    return default


def identity(node: Node, bus: str) -> dict[str, Any]:
    return node.pstate.get("gpus", {}).get(bus) or make_identity(node, bus)


def make_identity(node: Node, bus: str) -> dict[str, Any]:
    """Stable serial/UUID per (host, profile, bus): regenerating gives the same answer."""
    rng = random.Random(f"{os.uname().nodename}/{node.profile.get('name')}/{bus}")
    h = "".join(rng.choice("0123456789abcdef") for _ in range(32))
    uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    serial = "16501240" + "".join(rng.choice("0123456789") for _ in range(5))
    return {"uuid": uuid, "serial": serial}


def mig_mode(node: Node, bus: str) -> tuple[bool, bool]:
    m = node.pstate.get("mig_mode", {}).get(bus, {})
    return bool(m.get("current", False)), bool(m.get("pending", m.get("current", False)))


def gpus(node: Node, include_missing: bool = False) -> list[Gpu]:
    """All GPUs that enumerate on the PCI bus, in nvidia-smi order (PCI bus order)."""
    g = gpu_hw(node)
    n_links = int(hw(node).get("nvlink", {}).get("links_per_gpu", 0) or 0)
    # off the bus (gpu-missing) or on it but not brought up by the driver (gpu-unbound): the
    # driver's tools do not list either; lspci lists the unbound one (bus_gpus)
    missing = {_gpu_arg(f) for f in faults_of(node, "gpu-missing")}
    missing |= {_gpu_arg(f) for f in faults_of(node, "gpu-unbound")}
    lost = {_gpu_arg(f, 1) for f in faults_of(node, "xid") if f["args"][0] == "79"}
    lost |= {_gpu_arg(f) for f in faults_of(node, "gpu-err")}
    numas = g.get("numa_nodes") or []
    mods = g.get("module_ids") or []
    out: list[Gpu] = []
    idx = 0
    noise = random.Random()
    for slot, bus in enumerate(bus_ids(node)):
        if slot in missing and not include_missing:
            continue
        ident = identity(node, bus)
        cur, pend = mig_mode(node, bus)
        gpu = Gpu(
            slot=slot,
            index=idx,
            bus_id=bus,
            name=g["model"],
            uuid=ident["uuid"],
            serial=ident["serial"],
            module_id=int(mods[slot]) if slot < len(mods) else slot + 1,
            numa=int(numas[slot]) if slot < len(numas) else 0,
            lost=slot in lost,
            persistence=bool(node.vstate.get("persistence", {}).get(bus)),
            pcie_gen=int(g["pcie"]["gen_max"]),
            pcie_gen_max=int(g["pcie"]["gen_max"]),
            pcie_width=int(g["pcie"]["width_max"]),
            pcie_width_max=int(g["pcie"]["width_max"]),
            mig_current=cur,
            mig_pending=pend,
            temp=int(g.get("idle_temp_c", 31)) + noise.randint(0, 3),
            mem_temp=int(g.get("idle_temp_c", 31)) + 8 + noise.randint(0, 3),
            power=float(g.get("idle_power_w", 70)) + noise.uniform(-2.0, 4.0),
            links=[True] * n_links,
            hw=g,
        )
        idx += 1
        out.append(gpu)
    _apply_gpu_faults(node, out)
    return out


# fault kinds whose first argument is a GPU slot
GPU_FAULTS = {
    "nvlink-down",
    "pcie-downtrain",
    "ecc-uncorrectable",
    "remap-pending",
    "remap-failed",
    "thermal-throttle",
    "gpu-missing",
}


def _apply_gpu_faults(node: Node, gpu_list: list[Gpu]) -> None:
    by_slot = {g.slot: g for g in gpu_list}
    for f in node.faults:
        kind, args = f["kind"], f.get("args", [])
        if kind not in GPU_FAULTS:
            continue
        target = by_slot.get(_gpu_arg(f) or 0)
        if target is None:
            continue
        if kind == "nvlink-down":
            link = int(args[1]) if len(args) > 1 else -1
            if link < 0:
                target.links = [False] * len(target.links)
            elif link < len(target.links):
                target.links[link] = False
        elif kind == "pcie-downtrain":
            target.pcie_gen = int(args[1]) if len(args) > 1 else max(1, target.pcie_gen - 1)
            target.pcie_width = int(args[2]) if len(args) > 2 else target.pcie_width
        elif kind == "ecc-uncorrectable":
            target.dram_uncorr_vol += 1
            target.dram_uncorr_agg += 1
            target.remap_uncorr += 1
            target.remap_pending = True
        elif kind == "remap-pending":
            target.remap_uncorr += 1
            target.remap_pending = True
        elif kind == "remap-failed":
            target.remap_uncorr += 1
            target.remap_failure = True
        elif kind == "thermal-throttle":
            target.thermal = True
            target.temp = 91
            target.mem_temp = 97


def gpu_by_slot(node: Node, slot: int) -> Gpu | None:
    for g in gpus(node, include_missing=True):
        if g.slot == slot:
            return g
    return None


# --- driver -----------------------------------------------------------------------------


def read_userspace(component: str) -> str | None:
    try:
        with open(paths.p(f"{paths.USERSPACE}/{component}.version"), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except FileNotFoundError:
        return None


def stale_version(version: str) -> str:
    """A plausible older build of the same branch (what a not-yet-reloaded module reports)."""
    parts = version.split(".")
    try:
        parts[-1] = f"{max(int(parts[-1]) - 1, 0):0{len(parts[-1])}d}"
        if ".".join(parts) == version:
            parts[-2] = str(max(int(parts[-2]) - 1, 0))
    except ValueError:
        return version + "~old"
    return ".".join(parts)


def module_version(node: Node, name: str) -> str | None:
    """Version of a loaded module as the kernel reports it (faults may make it stale)."""
    mod = node.vstate.get("modules", {}).get(name)
    if not mod:
        return None
    version = str(mod.get("version", ""))
    if name == "nvidia":
        for f in faults_of(node, "driver-mismatch"):
            args = f.get("args", [])
            version = args[0] if args else stale_version(read_userspace("nvml") or version)
    return version


def bus_gpus(node: Node) -> list[Gpu]:
    """The GPUs the PCI bus enumerates (lspci): all but those off the bus (gpu-missing)."""
    gone = {_gpu_arg(f) for f in faults_of(node, "gpu-missing")}
    return [g for g in gpus(node, include_missing=True) if g.slot not in gone]


def nic_list(node: Node) -> list[dict[str, Any]]:
    """The profile's NICs as fitted: a nic-swap fault puts two cards in each other's slot
    (PCI address and the GPU they sit beside change places; the names stay)."""
    nics = [dict(n) for n in hw(node).get("nics", [])]
    by_hca = {n["hca"]: n for n in nics}
    for f in faults_of(node, "nic-swap"):
        a, b = (by_hca.get(h) for h in f["args"][:2])
        if a is not None and b is not None:
            for key in ("pci_bus_id", "gpu"):
                a[key], b[key] = b.get(key), a.get(key)
    return nics
