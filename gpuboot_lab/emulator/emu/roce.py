"""`rdma link` / `rdma system`, `show_gids` and `ethtool -S IFACE` of the node's RDMA NICs and
their VFs, from the same state ibstat prints: a port down (fault nic-down) is DOWN/DISABLED
in `rdma link` and has no GID (nor have its VFs); the RoCE counters are zero on a quiet port.
GIDs are the ones sysfs shows (emu.sriov)."""

from __future__ import annotations

import sys

from . import nic as nics
from . import sriov, state


def rdma(argv: list[str]) -> int:
    """`rdma link [show [DEV/PORT]]` and `rdma system [show]` / `rdma system set netns MODE`
    (iproute2)."""
    if argv and argv[0] in ("system", "sys"):
        return _system(argv[1:])
    if not argv or argv[0] != "link" or (len(argv) > 1 and argv[1] != "show"):
        sys.stderr.write('Object "{}" is unknown, try "rdma help".\n'.format(" ".join(argv)))
        return 1
    node = state.load()
    want = argv[2] if len(argv) > 2 else None
    for n in sriov.rdma_devices(node):
        if want and want not in (n["hca"], f"{n['hca']}/1"):
            continue
        down = nics.is_down(node, n["pf"] or n)
        ib = n["link_layer"] == "InfiniBand"
        ib_part = (
            f" subnet_prefix fe80:0000:0000:0000 lid {nics._lid(n)} sm_lid 1 lmc 0"
            if ib and n["pf"] is None
            else ""
        )
        state_word = "DOWN" if down else "ACTIVE"
        phys = "DISABLED" if down else "LINK_UP"
        netdev = f" netdev {n['netdev']}" if n.get("netdev") else ""
        sys.stdout.write(
            f"link {n['hca']}/1{ib_part} state {state_word} physical_state {phys}{netdev} \n"
        )
    return 0


def _system(argv: list[str]) -> int:
    if argv[:1] in ([], ["show"]):
        mode = sriov.netns_mode(state.load())
        if mode is None:
            sys.stderr.write("error: Operation not supported\n")  # no RDMA netlink: ib_core out
            return 1
        sys.stdout.write(f"netns {mode} copy-on-fork on\n")
        return 0
    if argv[:2] != ["set", "netns"] or len(argv) != 3 or argv[2] not in ("shared", "exclusive"):
        sys.stderr.write("Usage: rdma system set netns { shared | exclusive }\n")
        return 1
    with state.transaction() as node:
        if sriov.netns_mode(node) is None:
            sys.stderr.write("error: Operation not supported\n")
            return 1
        sriov.set_netns_mode(node, argv[2])
    return 0


def show_gids(argv: list[str]) -> int:
    """MOFED's show_gids: every GID of every RDMA device (PFs and VFs) as sysfs holds them."""
    node = state.load()
    rows = []
    for dev in sriov.rdma_devices(node):
        for index, gid, v4, ver in sriov.gids(node, dev):
            rows.append((dev["hca"], index, gid, v4, ver, dev["netdev"]))
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
    n = next((n for n in sriov.rdma_devices(node) if n.get("netdev") == argv[1]), None)
    if n is None:
        sys.stderr.write("Cannot get stats strings information: No such device\n")
        return 71
    names = ["rx_packets", "tx_packets", "rx_out_of_buffer"]
    names += [f"{d}_pause_ctrl_phy" for d in ("rx", "tx")]
    names += [f"{d}_prio{p}_pause" for p in range(8) for d in ("rx", "tx")]
    sys.stdout.write("NIC statistics:\n" + "".join(f"     {k}: 0\n" for k in names))
    return 0
