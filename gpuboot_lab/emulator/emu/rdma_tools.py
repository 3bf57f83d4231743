"""mlxconfig (MFT: the firmware's SR-IOV settings, applied at the next boot), MOFED's
cma_roce_mode / cma_roce_tos (RDMA CM's default RoCE mode and ToS of a device, in configfs)
and `udevadm settle` (the VFs written for come up)."""

from __future__ import annotations

import os
import sys
from typing import Any

from . import model, paths, sriov, state
from .state import Node

PARAMS = ("SRIOV_EN", "NUM_OF_VFS")
DEVICE_TYPE = {"MT4129": "ConnectX7", "MT4125": "ConnectX6DX", "MT4123": "ConnectX6",
               "MT41692": "BlueField3"}  # fmt: skip


def _nic_for(node: Node, dev: str) -> dict[str, Any] | None:
    """-d takes a PCI address (with or without the domain) or an mst device name."""
    for n in model.nic_list(node):
        pci = n["pci_bus_id"]
        if dev in (pci, pci[5:]) or dev.endswith(f"_pciconf{model.nic_list(node).index(n)}"):
            return n
    return None


def _shown(name: str, value: int) -> str:
    return ("True(1)" if value else "False(0)") if name == "SRIOV_EN" else str(value)


def _header(n: dict[str, Any]) -> str:
    return (
        "\nDevice #1:\n----------\n\n"
        f"Device type:        {DEVICE_TYPE.get(n['ca_type'], 'ConnectX7')}\n"
        f"Name:               {n.get('board', 'MCX75310AAS-NEA_Ax')}\n"
        f"Device:             {n['pci_bus_id']}\n\n"
    )


def mlxconfig(argv: list[str]) -> int:
    """mlxconfig [-y] -d DEV q [PARAM...] | set PARAM=VALUE..."""
    yes = "-y" in argv or "--yes" in argv
    args = [a for a in argv if a not in ("-y", "--yes")]
    if "-d" not in args or args.index("-d") + 2 > len(args):
        sys.stderr.write("-E- Missing device (-d)\n")
        return 1
    i = args.index("-d")
    dev, rest = args[i + 1], args[:i] + args[i + 2 :]
    if not rest or rest[0] not in ("q", "query", "s", "set"):
        sys.stderr.write(
            "-E- No command found. For more information please read the help message:\n"
        )
        return 1
    node = state.load()
    n = _nic_for(node, dev)
    if n is None:
        sys.stderr.write(f"-E- Failed to open device: {dev}. No such file or directory\n")
        return 1
    fw = sriov.firmware(node, n)
    if rest[0] in ("q", "query"):
        names = [p for p in rest[1:] if p in PARAMS] or list(PARAMS)
        unknown = [p for p in rest[1:] if p not in PARAMS]
        if unknown:
            sys.stderr.write(f"-E- Unknown Parameter: {unknown[0]}\n")
            return 1
        sys.stdout.write(_header(n) + f"Configurations:{'Next Boot':>43}\n")
        sys.stdout.write("".join(f"         {p:<36}{_shown(p, fw['next'][p])}\n" for p in names))
        return 0
    wanted: dict[str, int] = {}
    for item in rest[1:]:
        key, eq, value = item.partition("=")
        if key not in PARAMS or not eq:
            sys.stderr.write(f"-E- Unknown Parameter: {key}\n")
            return 1
        text = {"True": "1", "False": "0"}.get(value, value)
        if not text.isdigit():
            sys.stderr.write(f"-E- Illegal value {value} for parameter {key}\n")
            return 1
        wanted[key] = int(text)
    if wanted.get("NUM_OF_VFS", 0) > sriov.max_vfs(n):
        sys.stderr.write(
            f"-E- Failed to set configuration: NUM_OF_VFS {wanted['NUM_OF_VFS']} is above the "
            f"device's maximum ({sriov.max_vfs(n)})\n"
        )
        return 1
    out = _header(n) + f"Configurations:{'Next Boot':>43}{'New':>16}\n"
    for key, value in wanted.items():
        out += f"         {key:<36}{_shown(key, fw['next'][key]):<16}{_shown(key, value)}\n"
    sys.stdout.write(out + "\n Apply new Configuration? (y/n) [n] : ")
    if not yes:
        sys.stdout.write("\n")
        sys.stderr.write("-E- Aborted by user.\n")
        return 1
    sys.stdout.write(
        "y\nApplying... Done!\n-I- Please reboot machine to load new configurations.\n"
    )
    with state.transaction() as node:
        store = node.pstate.setdefault("mlxconfig", {})
        cur = sriov.firmware(node, n)
        store[n["pci_bus_id"]] = {"current": cur["current"], "next": {**cur["next"], **wanted}}
    return 0


def _cm_file(dev: str, port: str, name: str) -> str:
    return paths.p(f"{sriov.CONFIG}/rdma_cm/{dev}/ports/{port}/{name}")


def _cm_tool(argv: list[str], flag: str, name: str, values: dict[str, str]) -> int:
    opts = dict(zip(argv[::2], argv[1::2], strict=False))  # a lone last word is ignored
    dev, port = opts.get("-d"), opts.get("-p", "1")
    if not dev:
        sys.stderr.write(f"Usage: -d <dev> [-p <port>] [{flag} <value>]\n")
        return 1
    node = state.load()
    if dev not in {d["hca"] for d in sriov.rdma_devices(node)}:
        sys.stderr.write(f"Failed to create {sriov.CONFIG}/rdma_cm/{dev}: No such device\n")
        return 1
    path = _cm_file(dev, port, name)
    if not os.path.exists(path):
        sys.stderr.write(f"port {port} of {dev} has no {name}\n")
        return 1
    if flag not in opts:
        with open(path, encoding="utf-8") as fh:
            sys.stdout.write(fh.read())
        return 0
    value = values.get(opts[flag], opts[flag]) if values else opts[flag]
    valid = value in values.values() if values else value.isdigit() and int(value) <= 255
    if not valid:
        sys.stderr.write(f"invalid value {opts[flag]!r}\n")
        return 1
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(value + "\n")
    sys.stdout.write(value + "\n")
    return 0


def cma_roce_mode(argv: list[str]) -> int:
    """cma_roce_mode -d DEV [-p PORT] [-m 1|2]: show or set RDMA CM's default RoCE mode."""
    return _cm_tool(argv, "-m", "default_roce_mode", {"1": "IB/RoCE v1", "2": "RoCE v2"})


def cma_roce_tos(argv: list[str]) -> int:
    """cma_roce_tos -d DEV [-p PORT] [-t TOS]: show or set RDMA CM's default ToS."""
    return _cm_tool(argv, "-t", "default_roce_tos", {})


def udevadm(argv: list[str]) -> int:
    """`udevadm settle`: the queued device events are done (here: the VFs written for exist).
    Anything else goes to the node's own udevadm."""
    if argv[:1] == ["settle"]:
        with state.transaction() as node:
            sriov.settle(node)
        return 0
    for real in ("/usr/bin/udevadm", "/bin/udevadm"):
        if os.path.exists(real) and not paths.root():
            os.execv(real, [real, *argv])
    sys.stderr.write("udevadm: only settle is emulated here\n")
    return 1
