"""RDMA NICs: ibstat, ibv_devinfo and mlnx_qos (RoCE QoS: trust mode, PFC, prio->TC).

QoS settings live in the volatile state: like the real NIC they fall back to the firmware
defaults at reboot unless something (a boot service) applies them again.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import kmod, model, state
from .state import EmuError, Node

DEFAULT_QOS: dict[str, Any] = {
    "trust": "pcp",
    "pfc": [0] * 8,
    "prio_tc": [1, 0, 2, 3, 4, 5, 6, 7],  # mlx5 default: priority 0 -> tc1, 1 -> tc0
    "tsa": ["vendor"] * 8,
    "tc_bw": [0] * 8,
    "cable_len": 7,
}
VENDOR_PART = {
    "MT4123": 4123,
    "MT4124": 4124,
    "MT4125": 4125,
    "MT4126": 4126,
    "MT4129": 4129,
    "MT41692": 41692,
}


def _guid(nic: dict[str, Any], salt: str) -> str:
    import hashlib  # here: a shim's start-up pays for what it uses

    h = hashlib.sha256(f"{os.uname().nodename}/{nic['hca']}/{salt}".encode()).hexdigest()
    return "a088c203" + h[:8]  # NVIDIA/Mellanox OUI a0:88:c2 as in the captures


def node_guid(nic: dict[str, Any]) -> str:
    return "0x" + _guid(nic, "node")


def port_guid(nic: dict[str, Any]) -> str:
    if nic["link_layer"] == "InfiniBand":
        return node_guid(nic)
    g = _guid(nic, "node")  # RoCE: EUI-64 of the port MAC (ff:fe in the middle)
    return f"0x{int(g[:2], 16) ^ 2:02x}{g[2:6]}fffe{g[10:]}"


def _lid(nic: dict[str, Any]) -> int:
    return int(nic["hca"].split("_")[-1]) + 70


def is_down(node: Node, nic: dict[str, Any]) -> bool:
    return any(f["args"] and f["args"][0] == nic["hca"] for f in model.faults_of(node, "nic-down"))


def nics_visible(node: Node) -> list[dict[str, Any]]:
    """RDMA devices exist only while the mlx5 driver stack is loaded."""
    if "mlx5_ib" not in kmod.loaded(node):
        return []
    return model.nic_list(node)


def _sorted(nics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(nics, key=lambda n: n["hca"])  # ibstat lists devices by name (mlx5_10 < mlx5_2)


# --- ibstat --------------------------------------------------------------------------------


def _ibstat_block(node: Node, nic: dict[str, Any]) -> str:
    down = is_down(node, nic)
    ib = nic["link_layer"] == "InfiniBand"
    lid = _lid(nic) if ib and not down else 0
    return (
        f"CA '{nic['hca']}'\n"
        f"\tCA type: {nic['ca_type']}\n"
        "\tNumber of ports: 1\n"
        f"\tFirmware version: {nic['firmware']}\n"
        "\tHardware version: 0\n"
        f"\tNode GUID: {node_guid(nic)}\n"
        f"\tSystem image GUID: {node_guid(nic)}\n"
        "\tPort 1:\n"
        f"\t\tState: {'Down' if down else 'Active'}\n"
        f"\t\tPhysical state: {'Disabled' if down else 'LinkUp'}\n"
        f"\t\tRate: {40 if down else nic['rate']}\n"
        f"\t\tBase lid: {lid}\n"
        "\t\tLMC: 0\n"
        f"\t\tSM lid: {1 if ib and not down else 0}\n"
        f"\t\tCapability mask: {'0xa751e848' if ib else '0x00010000'}\n"
        f"\t\tPort GUID: {'0x0000000000000000' if down and not ib else port_guid(nic)}\n"
        f"\t\tLink layer: {nic['link_layer']}\n"
    )


def ibstat(argv: list[str]) -> int:
    node = state.load()
    nics = _sorted(nics_visible(node))
    names = [a for a in argv if not a.startswith("-")]
    if "-l" in argv or "--list_of_cas" in argv:
        sys.stdout.write("".join(n["hca"] + "\n" for n in nics))
        return 0
    if not nics and not names:
        sys.stderr.write(
            f"ibpanic: [{os.getpid()}] main: stat of IB device 'mlx5_0' failed: "
            "No such file or directory\n"
        )
        return 255
    if names:
        chosen = []
        for name in names[:1]:
            match = [n for n in nics if n["hca"] == name]
            if not match:
                sys.stderr.write(
                    f"ibpanic: [{os.getpid()}] main: stat of IB device '{name}' "
                    "failed: No such file or directory\n"
                )
                return 255
            chosen += match
        nics = chosen
    sys.stdout.write("".join(_ibstat_block(node, n) for n in nics))
    return 0


# --- ibv_devinfo -----------------------------------------------------------------------------


def _colon_guid(guid: str) -> str:
    g = guid[2:]
    return ":".join(g[i : i + 4] for i in range(0, 16, 4))


def ibv_devinfo(argv: list[str]) -> int:
    node = state.load()
    nics = nics_visible(node)
    want = None
    for i, arg in enumerate(argv):
        if arg in ("-d", "--ib-dev") and i + 1 < len(argv):
            want = argv[i + 1]
        elif arg.startswith("--ib-dev="):
            want = arg.split("=", 1)[1]
    if "-l" in argv or "--list" in argv:
        sys.stdout.write(
            f"{len(nics)} HCA{'s' if len(nics) != 1 else ''} found:\n"
            + "".join(f"\t{n['hca']}\n" for n in nics)
        )
        return 0
    if want is not None:
        nics = [n for n in nics if n["hca"] == want]
        if not nics:
            sys.stderr.write(f"IB device '{want}' wasn't found\n")
            return 255
    if not nics:
        sys.stdout.write("No IB devices found\n")
        return 255
    blocks = []
    for nic in nics:
        down = is_down(node, nic)
        ib = nic["link_layer"] == "InfiniBand"
        mtu = "4096 (5)"
        blocks.append(
            f"hca_id:\t{nic['hca']}\n"
            "\ttransport:\t\t\tInfiniBand (0)\n"
            f"\tfw_ver:\t\t\t\t{nic['firmware']}\n"
            f"\tnode_guid:\t\t\t{_colon_guid(node_guid(nic))}\n"
            f"\tsys_image_guid:\t\t\t{_colon_guid(node_guid(nic))}\n"
            "\tvendor_id:\t\t\t0x02c9\n"
            f"\tvendor_part_id:\t\t\t{VENDOR_PART.get(nic['ca_type'], 4129)}\n"
            "\thw_ver:\t\t\t\t0x0\n"
            "\tboard_id:\t\t\tMT_0000000838\n"
            "\tphys_port_cnt:\t\t\t1\n"
            "\t\tport:\t1\n"
            f"\t\t\tstate:\t\t\t{'PORT_DOWN (1)' if down else 'PORT_ACTIVE (4)'}\n"
            f"\t\t\tmax_mtu:\t\t{mtu}\n"
            f"\t\t\tactive_mtu:\t\t{'1024 (3)' if down else mtu}\n"
            f"\t\t\tsm_lid:\t\t\t{1 if ib and not down else 0}\n"
            f"\t\t\tport_lid:\t\t{_lid(nic) if ib and not down else 0}\n"
            "\t\t\tport_lmc:\t\t0x00\n"
            f"\t\t\tlink_layer:\t\t{nic['link_layer']}\n"
        )
    sys.stdout.write("\n".join(blocks) + "\n")
    return 0


# --- mlnx_qos ----------------------------------------------------------------------------------


def qos_of(node: Node, netdev: str) -> dict[str, Any]:
    stored = node.vstate.get("qos", {}).get(netdev)
    merged = {k: (list(v) if isinstance(v, list) else v) for k, v in DEFAULT_QOS.items()}
    if stored:
        merged.update(stored)
    return merged


def _nic_by_netdev(node: Node, netdev: str) -> dict[str, Any] | None:
    return next((n for n in model.nic_list(node) if n.get("netdev") == netdev), None)


def _eight(text: str, what: str, cast: type = int) -> list[Any]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 8:
        raise EmuError(f"{what} needs 8 comma-separated values, got {text!r}")
    try:
        return [cast(p) for p in parts]
    except ValueError:
        raise EmuError(f"bad value in {what}: {text!r}") from None


def render_qos(q: dict[str, Any]) -> str:
    lines = [
        "DCBX mode: OS controlled",
        f"Priority trust state: {q['trust']}",
        "dscp2prio mapping:",
    ]
    for prio in range(8):
        dscps = ",".join(f"{d:02d}" for d in range(prio * 8 + 7, prio * 8 - 1, -1))
        lines.append(f"        prio:{prio} dscp:{dscps},")
    lines.append(f"Cable len: {q['cable_len']}")
    lines.append("PFC configuration:")
    lines.append("        priority    0   1   2   3   4   5   6   7")
    lines.append("        enabled     " + "".join(f"{v:<4}" for v in q["pfc"]))
    for tc in range(8):
        prios = [p for p in range(8) if q["prio_tc"][p] == tc]
        lines.append(
            f"tc: {tc} ratelimit: unlimited, tsa: {q['tsa'][tc]}"
            + (f", bw: {q['tc_bw'][tc]}%" if q["tsa"][tc] == "ets" else "")
        )
        lines.extend(f"         priority:  {p}" for p in prios)
    return "\n".join(lines) + "\n"


def mlnx_qos(argv: list[str]) -> int:
    opts: dict[str, str] = {}
    it = iter(argv)
    for arg in it:
        key, eq, val = arg.partition("=")
        if key in (
            "-i",
            "--interface",
            "--trust",
            "--pfc",
            "-f",
            "-p",
            "--prio_tc",
            "--tsa",
            "-s",
            "--tc_bw",
            "-t",
            "--cable_len",
            "-d",
            "--dcbx",
        ):
            opts[key] = val if eq else next(it, "")
    iface = opts.get("-i") or opts.get("--interface")
    if not iface:
        sys.stderr.write("Usage: mlnx_qos -i <interface> [options]\n")
        return 1
    changes = {k: v for k, v in opts.items() if k not in ("-i", "--interface")}
    if not changes:
        node = state.load()
        if _nic_by_netdev(node, iface) is None or not nics_visible(node):
            sys.stderr.write(f'Netlink error: Cannot find device "{iface}"\n')
            return 1
        sys.stdout.write(render_qos(qos_of(node, iface)))
        return 0
    with state.transaction() as node:
        if _nic_by_netdev(node, iface) is None or not nics_visible(node):
            sys.stderr.write(f'Netlink error: Cannot find device "{iface}"\n')
            return 1
        q = qos_of(node, iface)
        try:
            for key, val in changes.items():
                if key == "--trust":
                    if val not in ("pcp", "dscp"):
                        raise EmuError(f"invalid trust state {val!r} (pcp or dscp)")
                    q["trust"] = val
                elif key in ("--pfc", "-f"):
                    q["pfc"] = [1 if v else 0 for v in _eight(val, "--pfc")]
                elif key in ("-p", "--prio_tc"):
                    q["prio_tc"] = _eight(val, "--prio_tc")
                elif key in ("-s", "--tsa"):
                    q["tsa"] = _eight(val, "--tsa", str)
                elif key in ("-t", "--tc_bw"):
                    q["tc_bw"] = _eight(val, "--tc_bw")
                elif key == "--cable_len":
                    q["cable_len"] = int(val)
        except EmuError as exc:
            sys.stderr.write(f"mlnx_qos: {exc}\n")
            return 1
        node.vstate.setdefault("qos", {})[iface] = q
        sys.stdout.write(render_qos(q))
    return 0


def drift(node: Node, hca: str) -> dict[str, Any]:
    """qos-drift: the NIC forgets its QoS (firmware reset, a tool overwrote it). Returns what
    was configured so clearing the fault can put it back."""
    nic = next(n for n in model.nic_list(node) if n["hca"] == hca)
    saved = qos_of(node, nic["netdev"])
    node.vstate.setdefault("qos", {})[nic["netdev"]] = {
        k: (list(v) if isinstance(v, list) else v) for k, v in DEFAULT_QOS.items()
    }
    return saved


def undrift(node: Node, hca: str, saved: dict[str, Any]) -> None:
    nic = next(n for n in model.nic_list(node) if n["hca"] == hca)
    if qos_of(node, nic["netdev"]) == {**DEFAULT_QOS}:  # nobody re-applied it meanwhile
        node.vstate.setdefault("qos", {})[nic["netdev"]] = saved


# --- ibstatus ----------------------------------------------------------------------------------

RATE_NAMES = {
    10: "4X SDR",
    20: "4X DDR",
    40: "4X QDR",
    56: "4X FDR",
    100: "4X EDR",
    200: "4X HDR",
    400: "4X NDR",
    800: "4X XDR",
}


def _gid(nic: dict[str, Any]) -> str:
    g = port_guid(nic)[2:]
    return "fe80:0000:0000:0000:" + ":".join(g[i : i + 4] for i in range(0, 16, 4))


def ibstatus(argv: list[str]) -> int:
    node = state.load()
    nics = _sorted(nics_visible(node))
    names = [a for a in argv if not a.startswith("-")]
    if names:
        nics = [n for n in nics if n["hca"] in names]
    blocks = []
    for n in nics:
        down = is_down(node, n)
        ib = n["link_layer"] == "InfiniBand"
        rate = 40 if down else int(n["rate"])
        blocks.append(
            f"Infiniband device '{n['hca']}' port 1 status:\n"
            f"\tdefault gid:\t {_gid(n) if not down else 'unknown'}\n"
            f"\tbase lid:\t {hex(_lid(n)) if ib and not down else '0x0'}\n"
            f"\tsm lid:\t\t {'0x1' if ib and not down else '0x0'}\n"
            f"\tstate:\t\t {'1: DOWN' if down else '4: ACTIVE'}\n"
            f"\tphys state:\t {'3: Disabled' if down else '5: LinkUp'}\n"
            f"\trate:\t\t {rate} Gb/sec ({RATE_NAMES.get(rate, '4X')})\n"
            f"\tlink_layer:\t {n['link_layer']}\n"
        )
    sys.stdout.write("\n".join(blocks) + ("\n" if blocks else ""))
    return 0
