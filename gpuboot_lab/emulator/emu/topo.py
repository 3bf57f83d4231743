"""nvidia-smi topo -m: the GPU/NIC connection matrix (tab separated, no ANSI off a tty)."""

from __future__ import annotations

import sys

from . import model, smi, state
from .model import Gpu

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501 (verbatim tool text)


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except smi.Exit as exc:
        return exc.rc


def _pcie(numa_a: int, numa_b: int) -> str:
    return "NODE" if numa_a == numa_b else "SYS"


def _main(argv: list[str]) -> int:
    if not any(a in ("-m", "--matrix", "-mp", "--matrix_pci") for a in argv):
        sys.stdout.write(
            "Invalid combination of input arguments. Please run 'nvidia-smi topo -h' for help.\n"
        )
        return smi.RC_INVALID_ARG
    node = state.load()
    smi.driver_version(node)
    gpus = [g for g in model.gpus(node) if not g.lost]
    nics = model.nic_list(node)
    pci_only = "-mp" in argv or "--matrix_pci" in argv
    cpus = model.hw(node).get("cpu", {}).get("numa_cpus", [])
    by_slot = {g.slot: g for g in model.gpus(node, include_missing=True)}

    def nic_numa(nic: dict) -> int:
        g = by_slot.get(int(nic.get("gpu", 0)))
        return g.numa if g else 0

    def gpu_gpu(a: Gpu, b: Gpu) -> str:
        if a is b:
            return " X "
        bonded = min(sum(a.links), sum(b.links)) if not pci_only else 0
        return f"NV{bonded}" if bonded else _pcie(a.numa, b.numa)

    def gpu_nic(g: Gpu, nic: dict) -> str:
        if int(nic.get("gpu", -1)) == g.slot:
            return "PIX"
        return _pcie(g.numa, nic_numa(nic))

    cols = [f"GPU{g.index}" for g in gpus] + [f"NIC{i}" for i in range(len(nics))]
    lines = ["\t" + "\t".join([*cols, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for g in gpus:
        cells = [gpu_gpu(g, o) for o in gpus] + [gpu_nic(g, n) for n in nics]
        affinity = cpus[g.numa] if g.numa < len(cpus) else ""
        lines.append("\t".join([f"GPU{g.index}", *cells, affinity, str(g.numa), "", "N/A"]))
    for i, nic in enumerate(nics):
        cells = [gpu_nic(g, nic) for g in gpus]
        cells += [
            " X " if j == i else _pcie(nic_numa(nic), nic_numa(o)) for j, o in enumerate(nics)
        ]
        lines.append("\t".join([f"NIC{i}", *cells, "", "", "", ""]))
    text = "\n".join(lines) + "\n" + LEGEND
    if nics:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: {n['hca']}\n" for i, n in enumerate(nics))
    sys.stdout.write(text)
    return 0
