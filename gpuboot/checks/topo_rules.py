"""TOP-001: the GPU/NIC topology as a rail-optimized fabric needs it, from ``nvidia-smi topo
-m`` against the profile.

- Each GPU's rail NIC (the profile's ``nics[].gpu``) sits behind the same PCIe switch: PIX
  or PXB (``hardware.topology.rail_links``), never NODE/PHB/SYS. A NIC in the wrong slot or a
  swapped riser puts another card there: FAIL naming the GPU, its rail NIC and the NIC that
  is beside it instead (a NIC's rail is the leaf its cable goes to, so its name matters).
- NVLink mesh: on NVSwitch SKUs (``hardware.topology.nvlink_mesh``, default: the SKU has
  NVSwitches) every GPU pair is joined by NV#; a pair over PCIe is FAIL naming it (how many
  links are up is NVL-001's finding).
- GPU NUMA affinity as ``hardware.gpu.numa_nodes``: a difference is WARN (a BIOS NPS or
  kernel numa= setting costs bandwidth, not correctness); a GPU with no NUMA affinity
  (N/A, as in VMs) is not judged.

GPUs are matched by index, so a matrix short of the profile's GPUs is not judged here
(GPU-001 and PCI-002 name the missing one). An unreadable matrix is ERROR.
"""

from __future__ import annotations

from gpuboot.bundle.model import Evidence
from gpuboot.bundle.names import TOPO_FILE
from gpuboot.checks.base import FAIL, WARN, NodeContext, Result, not_applicable, probe
from gpuboot.evidence.topo import TopoMatrix, parse_topo_matrix

DEFAULT_RAIL_LINKS = ("PIX", "PXB")


def expectations(hardware: dict) -> tuple[tuple[str, ...], bool]:
    """(rail link kinds, NVLink mesh required) from the profile, with their defaults."""
    topo = hardware.get("topology") or {}
    rail = tuple(topo.get("rail_links") or DEFAULT_RAIL_LINKS)
    mesh = topo.get("nvlink_mesh")
    if mesh is None:
        mesh = int(hardware["nvlink"].get("nvswitch_count", 0) or 0) > 0
    return rail, bool(mesh)


def _nic_names(m: TopoMatrix) -> dict[str, str]:
    """Device name (mlx5_0) -> matrix column (NIC0); older drivers head columns by name."""
    return {m.nic_names.get(col, col): col for col in m.devices if col not in m.gpus}


def _rails(m: TopoMatrix, ctx: NodeContext, kinds: tuple[str, ...]) -> list[str]:
    cols = _nic_names(m)
    problems = []
    for nic in ctx.hardware["nics"]:
        if nic.get("gpu") is None:
            continue
        gpu, hca = f"GPU{int(nic['gpu'])}", nic["hca"]
        col = cols.get(hca)
        if col is None:
            problems.append(f"{gpu}: its rail NIC {hca} is not in topo -m")
            continue
        link = m.link(gpu, col)
        if link in kinds:
            continue
        near = [name for name, c in cols.items() if m.link(gpu, c) in kinds]
        instead = f"; beside it instead: {', '.join(near)}" if near else ""
        problems.append(f"{gpu}: its rail NIC {hca} is {link}, expected {'/'.join(kinds)}{instead}")
    return problems


def _mesh(m: TopoMatrix) -> list[str]:
    gpus = m.gpus
    return [
        f"{a}-{b} {m.link(a, b)}, not NVLink"
        for i, a in enumerate(gpus)
        for b in gpus[i + 1 :]
        if m.nvlink_count(a, b) is None
    ]


def _numa(m: TopoMatrix, ctx: NodeContext) -> list[str]:
    want = ctx.hardware["gpu"].get("numa_nodes") or []
    out = []
    for i, expected in enumerate(want):
        row = m.rows.get(f"GPU{i}")
        have = row.numa_affinity if row else None
        if have is not None and have != str(expected):
            out.append(f"GPU{i} on NUMA node {have}, expected {expected}")
    return out


def check_topology(evidence: Evidence, ctx: NodeContext) -> Result | None:
    m = parse_topo_matrix(probe(evidence, TOPO_FILE).stdout)
    count = int(ctx.hardware["gpu"]["count"])
    if len(m.gpus) != count:
        return not_applicable(
            f"topo -m lists {len(m.gpus)} of {count} GPUs: GPUs are matched by index "
            "(GPU-001 and PCI-002 name the missing one)"
        )
    kinds, mesh = expectations(ctx.hardware)
    wrong = _rails(m, ctx, kinds) + (_mesh(m) if mesh else [])
    numa = _numa(m, ctx)
    if wrong:
        return Result(FAIL, "; ".join(wrong + numa))
    if numa:
        return Result(
            WARN,
            "; ".join(numa),
            action="check the BIOS NUMA-per-socket setting and the kernel's numa= option: jobs "
            "pin CPUs and memory by the profile's GPU/NUMA map",
        )
    return None
