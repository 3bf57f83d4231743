"""lspci (pciutils): the node's GPUs, NVSwitches and ConnectX functions as the PCI bus
enumerates them, whatever the driver makes of them (a gpu-unbound GPU is listed, a
gpu-missing one is not).

Formats as pciutils 3.x prints them: ``-n`` ``19:00.0 0302: 10de:2330 (rev a1)``, ``-nn``
``19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330]
(rev a1)``, names only without -n; ``-D`` always prints the domain; ``-d [V]:[D][:C]``
selects; no "(rev ..)" for revision 00 (ConnectX). Other options (-k, -v, -s) are
accepted and ignored.
"""

from __future__ import annotations

import sys
from typing import Any

from . import model, state

# pci.ids names of the parts the profiles use: vendor:device -> device name
NAMES = {
    "10de:2330": "GH100 [H100 SXM5 80GB]",
    "10de:2335": "GH100 [H200 SXM 141GB]",
    "10de:20b2": "GA100 [A100 SXM4 80GB]",
    "10de:26b9": "AD102GL [L40S]",
    "10de:22a3": "GH100 [H100 NVSwitch]",
    "10de:1af1": "GA100 [A100 NVSwitch]",
    "15b3:1021": "MT2910 Family [ConnectX-7]",
    "15b3:101d": "MT2892 Family [ConnectX-6 Dx]",
    "15b3:101b": "MT28908 Family [ConnectX-6]",
}
VENDORS = {"10de": "NVIDIA Corporation", "15b3": "Mellanox Technologies"}
CLASSES = {
    "0302": "3D controller",
    "0300": "VGA compatible controller",
    "0680": "Bridge",
    "0200": "Ethernet controller",
    "0207": "Infiniband controller",
}
NVSWITCH_BY_ARCH = {"Hopper": "22a3", "Ampere": "1af1"}
NVSWITCH_BUS = 0x05  # NVSwitches enumerate on buses of their own, 05:00.0 onwards (HGX)


def functions(node: state.Node) -> list[dict[str, Any]]:
    """(address, class, vendor, device, rev) of every emulated function, in bus order."""
    hw = model.hw(node)
    g = hw["gpu"]
    gpu_dev = str(g["pci_device_id"]).lower().removeprefix("0x")[:4]
    out = [
        {"addr": b.bus_id[4:].lower(), "cls": "0302", "ven": "10de", "dev": gpu_dev, "rev": "a1"}
        for b in model.bus_gpus(node)
    ]
    switch = NVSWITCH_BY_ARCH.get(str(g.get("architecture", "")), "22a3")
    nics = model.nic_list(node)
    taken = {b.split(":")[-2].lower() for b in model.bus_ids(node)}
    taken |= {str(n["pci_bus_id"]).split(":")[-2].lower() for n in nics}
    free = (f"{b:02x}" for b in range(NVSWITCH_BUS, 0x100) if f"{b:02x}" not in taken)
    for _ in range(int(hw.get("nvlink", {}).get("nvswitch_count", 0) or 0)):
        addr = f"0000:{next(free)}:00.0"
        out.append({"addr": addr, "cls": "0680", "ven": "10de", "dev": switch, "rev": "a1"})
    for nic in nics:
        cls = "0207" if nic.get("link_layer") == "InfiniBand" else "0200"
        dev = f"{int(str(nic['ca_type']).removeprefix('MT')):04x}"
        addr = str(nic["pci_bus_id"]).lower()
        out.append({"addr": addr, "cls": cls, "ven": "15b3", "dev": dev, "rev": None})
    return sorted(out, key=lambda f: f["addr"])


def _selected(f: dict[str, Any], sel: str | None) -> bool:
    if not sel:
        return True
    parts = [*sel.split(":"), "", ""][:3]
    return all(
        not want or want.lower() == have
        for want, have in zip(parts, (f["ven"], f["dev"], f["cls"]), strict=True)
    )


def line(f: dict[str, Any], numeric: int, domain: bool) -> str:
    addr = f["addr"] if domain else f["addr"].removeprefix("0000:")
    ids = f"{f['ven']}:{f['dev']}"
    rev = f" (rev {f['rev']})" if f["rev"] else ""
    if numeric == 1:
        return f"{addr} {f['cls']}: {ids}{rev}"
    cls = CLASSES.get(f["cls"], f"Class {f['cls']}")
    name = f"{VENDORS[f['ven']]} {NAMES.get(ids, 'Device')}"
    if numeric >= 2:
        return f"{addr} {cls} [{f['cls']}]: {name} [{ids}]{rev}"
    return f"{addr} {cls}: {name}{rev}"


def main(argv: list[str]) -> int:
    numeric, domain, sel = 0, False, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "-d":
            if not args:
                sys.stderr.write("lspci: option requires an argument -- 'd'\n")
                return 2
            sel = args.pop(0)
        elif a.startswith("-d") and len(a) > 2:
            sel = a[2:]
        elif a == "-s" and args:
            args.pop(0)
        elif a.startswith("-") and not a.startswith("--"):
            numeric += a.count("n")
            domain = domain or "D" in a
    node = state.load()
    for f in functions(node):
        if _selected(f, sel):
            sys.stdout.write(line(f, numeric, domain) + "\n")
    return 0
