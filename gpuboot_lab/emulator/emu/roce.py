"""`rdma link`, `show_gids` and `ethtool -S IFACE` of the node's RDMA NICs, from the same
state ibstat prints: a port down (fault nic-down) is DOWN/DISABLED in `rdma link` and has no
GID; the RoCE counters are zero on a quiet port."""

from __future__ import annotations

import ipaddress
import sys

from . import nic as nics
from . import state


def _links(node) -> list[dict]:
    return nics._sorted(nics.nics_visible(node))


def rdma(argv: list[str]) -> int:
    """`rdma link [show [DEV/PORT]]` (iproute2)."""
    if not argv or argv[0] != "link" or (len(argv) > 1 and argv[1] != "show"):
        sys.stderr.write('Object "{}" is unknown, try "rdma help".\n'.format(" ".join(argv)))
        return 1
    node = state.load()
    want = argv[2] if len(argv) > 2 else None
    for n in _links(node):
        if want and want not in (n["hca"], f"{n['hca']}/1"):
            continue
        down = nics.is_down(node, n)
        ib = n["link_layer"] == "InfiniBand"
        ib_part = (
            f" subnet_prefix fe80:0000:0000:0000 lid {nics._lid(n)} sm_lid 1 lmc 0" if ib else ""
        )
        state_word = "DOWN" if down else "ACTIVE"
        phys = "DISABLED" if down else "LINK_UP"
        netdev = f" netdev {n['netdev']}" if n.get("netdev") else ""
        sys.stdout.write(
            f"link {n['hca']}/1{ib_part} state {state_word} physical_state {phys}{netdev} \n"
        )
    return 0


def _ipv4(n: dict) -> str:
    """A rail's address: one /24 per rail, the host part from its HCA number."""
    idx = int(n["hca"].split("_")[-1])
    return str(ipaddress.IPv4Address(f"192.168.{100 + idx}.10"))


def show_gids(argv: list[str]) -> int:
    node = state.load()
    rows = []
    for n in _links(node):
        if n["link_layer"] != "Ethernet" or nics.is_down(node, n):
            continue
        mac = nics.port_guid(n).replace("0x", "")[-12:]
        ll = f"fe80:0000:0000:0000:{mac[0:4]}:{mac[4:6]}ff:fe{mac[6:8]}:{mac[8:12]}"
        v4 = _ipv4(n)
        mapped = "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(
            *ipaddress.IPv4Address(v4).packed
        )
        rows += [
            (n["hca"], 0, ll, "", "v1", n["netdev"]),
            (n["hca"], 1, ll, "", "v2", n["netdev"]),
            (n["hca"], 2, mapped, v4, "v1", n["netdev"]),
            (n["hca"], 3, mapped, v4, "v2", n["netdev"]),
        ]
    out = ["DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV",
           "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---"]  # fmt: skip
    out += [f"{d}\t1\t{i}\t{g}\t\t{ip:<15}\t{v}\t{dev}" for d, i, g, ip, v, dev in rows]
    out.append(f"n_gids_found={len(rows)}")
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def ethtool(argv: list[str]) -> int:
    """`ethtool -S IFACE`: the mlx5 counters the RoCE rules record (zero on a quiet port)."""
    if len(argv) != 2 or argv[0] not in ("-S", "--statistics"):
        sys.stderr.write("ethtool: bad command line argument(s)\n")
        return 1
    node = state.load()
    n = next((n for n in _links(node) if n.get("netdev") == argv[1]), None)
    if n is None:
        sys.stderr.write("Cannot get stats strings information: No such device\n")
        return 71
    names = ["rx_packets", "tx_packets", "rx_out_of_buffer"]
    names += [f"{d}_pause_ctrl_phy" for d in ("rx", "tx")]
    names += [f"{d}_prio{p}_pause" for p in range(8) for d in ("rx", "tx")]
    sys.stdout.write("NIC statistics:\n" + "".join(f"     {k}: 0\n" for k in names))
    return 0
