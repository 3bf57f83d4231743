"""RDMA for pods on the rail NICs: the firmware's SR-IOV settings (mlxconfig), the VFs a
write to sriov_numvfs creates, their RDMA devices and GIDs, the RDMA subsystem's namespace
mode (`rdma system`) and RDMA CM's per-device defaults (configfs rdma_cm, cma_roce_*).

Where it lives, as on a real node:
- firmware: persistent state; `mlxconfig set` changes the next boot's values, a boot makes
  them current; sriov_totalvfs is the current NUM_OF_VFS (0 without SRIOV_EN).
- VFs: volatile state, created from what was written to sriov_numvfs. A real write creates
  them at once; here a plain file cannot react, so `udevadm settle` (which scripts run after
  the write anyway, to wait for the VF netdevs) creates them. A boot starts with none.
- MTU, RDMA CM mode and ToS: the files under sysfs/configfs themselves (writes go straight
  to them, as to the real attributes); a boot starts from the defaults.
- namespace mode: ib_core's, taken from `options ib_core netns_mode=` at its load and
  changed by `rdma system set netns`.
The configfs group rdma_cm/<dev> is shown for every RDMA device, as if created (mkdir -p
on it is harmless, as on a real node after the first mkdir). emu.sriov_sysfs builds the files.
"""

from __future__ import annotations

import glob
from typing import Any

from . import kmod, kmsg, model, nic, paths, state
from .state import EmuError, Node

FW_DEFAULT = {"SRIOV_EN": 1, "NUM_OF_VFS": 8}  # a ConnectX-7 as NVIDIA ships it for SR-IOV
FW_MAX_VFS = 127  # ConnectX-7 per PF; a profile NIC's max_vfs overrides
CONFIG = paths.RUN + "/config"  # the lab's configfs root (gpuboot_configfs)


# --- firmware ----------------------------------------------------------------------------------


def firmware(node: Node, n: dict[str, Any]) -> dict[str, dict[str, int]]:
    """{"current": {...}, "next": {...}} of one NIC's SRIOV_EN and NUM_OF_VFS."""
    fw = node.pstate.get("mlxconfig", {}).get(n["pci_bus_id"])
    if fw:
        return fw
    return {"current": dict(FW_DEFAULT), "next": dict(FW_DEFAULT)}


def total_vfs(node: Node, n: dict[str, Any]) -> int:
    cur = firmware(node, n)["current"]
    return int(cur["NUM_OF_VFS"]) if int(cur["SRIOV_EN"]) else 0


def max_vfs(n: dict[str, Any]) -> int:
    return int(n.get("max_vfs", FW_MAX_VFS))


# --- names -------------------------------------------------------------------------------------


def vf_pci(n: dict[str, Any], i: int) -> str:
    """VF i of a PF at ...:dd.0: function offset 1, stride 1 (a single-port ConnectX)."""
    domain_bus, devfn = n["pci_bus_id"].rsplit(":", 1)
    dev = int(devfn.split(".")[0], 16)
    k = i + 1
    return f"{domain_bus}:{dev + k // 8:02x}.{k % 8}"


def vf_netdev(n: dict[str, Any], i: int) -> str:
    """systemd's name for VF i: the PF's path name without its port suffix, v<i>."""
    base = n["netdev"].rsplit("np", 1)[0] if "np" in n["netdev"] else n["netdev"]
    return f"{base}v{i}"


def vfs(node: Node, n: dict[str, Any]) -> list[dict[str, Any]]:
    """The VFs of a PF as created: [{index, pci, netdev, hca}], none while mlx5 is unloaded."""
    if not nic.nics_visible(node):
        return []
    return list(node.vstate.get("vfs", {}).get(n["pci_bus_id"], []))


def rdma_devices(node: Node) -> list[dict[str, Any]]:
    """Every RDMA device: the visible PFs, then each one's VFs (hca, netdev, link_layer, pf)."""
    out = []
    pfs = nic._sorted(nic.nics_visible(node))
    for n in pfs:
        out.append({**n, "pf": None})
    for n in pfs:
        for vf in vfs(node, n):
            out.append({**vf, "link_layer": n["link_layer"], "pf": n, "rate": n["rate"]})
    return out


# --- GIDs --------------------------------------------------------------------------------------


def _mac(dev: dict[str, Any]) -> str:
    pf = dev["pf"] or dev
    g = nic.port_guid(pf)[2:]  # EUI-64 of the PF port's MAC
    mac = [int(g[i : i + 2], 16) for i in (0, 2, 4, 10, 12, 14)]
    mac[0] ^= 0x02  # the EUI-64 flips the universal/local bit
    if dev["pf"] is not None:  # a VF: locally administered, numbered after the PF's
        mac[0] |= 0x02
        mac[5] = (mac[5] + 1 + int(dev["index"])) & 0xFF
    return ":".join(f"{b:02x}" for b in mac)


def _link_local(mac: str) -> str:
    b = [int(x, 16) for x in mac.split(":")]
    eui = [b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
    words = [f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2)]
    return "fe80:0000:0000:0000:" + ":".join(words)


def _ipv4(n: dict[str, Any]) -> str:
    """A rail's address: one /24 per rail, the host part fixed (VFs get theirs in the pod)."""
    return f"192.168.{100 + int(n['hca'].split('_')[-1])}.10"


def _mapped(v4: str) -> str:
    a, b, c, d = (int(x) for x in v4.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def no_v2(node: Node) -> set[str]:
    """Netdevs whose RoCE v2 GIDs are missing (fault no-v2-gid)."""
    return {f["args"][0] for f in model.faults_of(node, "no-v2-gid")}


def gids(node: Node, dev: dict[str, Any]) -> list[tuple[int, str, str, str]]:
    """[(index, gid, ipv4 or '', 'v1'|'v2')] of an Ethernet port that is up: the link-local
    pair, then (PFs) the IPv4-mapped pair."""
    if dev["link_layer"] != "Ethernet" or nic.is_down(node, dev["pf"] or dev):
        return []
    ll = _link_local(_mac(dev))
    rows = [(0, ll, "", "v1"), (1, ll, "", "v2")]
    if dev["pf"] is None:
        v4 = _ipv4(dev)
        rows += [(2, _mapped(v4), v4, "v1"), (3, _mapped(v4), v4, "v2")]
    if dev["netdev"] in no_v2(node):
        rows = [r for r in rows if r[3] != "v2"]
    return rows


# --- namespace mode ----------------------------------------------------------------------------


def _option_mode() -> str:
    """The mode /etc/modprobe.d gives ib_core at load (netns_mode: 1/Y shared, 0/N exclusive;
    the last line wins, as modprobe reads them)."""
    mode = "shared"
    for conf in sorted(glob.glob(paths.p("/etc/modprobe.d/*.conf"))):
        with open(conf, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                words = line.split("#", 1)[0].split()
                if len(words) < 3 or words[0] != "options" or kmod.norm(words[1]) != "ib_core":
                    continue
                for word in words[2:]:
                    key, _, value = word.partition("=")
                    if key == "netns_mode" and value in ("0", "N", "n"):
                        mode = "exclusive"
                    elif key == "netns_mode" and value in ("1", "Y", "y"):
                        mode = "shared"
    return mode


def netns_mode(node: Node) -> str | None:
    """ib_core's namespace mode, None while it is not loaded."""
    loaded = kmod.loaded(node).get("ib_core")
    if loaded is None:
        return None
    stored = node.vstate.get("rdma_netns") or {}
    if stored.get("seq") == loaded["seq"]:
        return str(stored["mode"])
    return _option_mode()  # set since this load: none; the load took the option


def set_netns_mode(node: Node, mode: str) -> None:
    loaded = kmod.loaded(node).get("ib_core")
    if loaded is None:
        raise EmuError("ib_core is not loaded")
    node.vstate["rdma_netns"] = {"mode": mode, "seq": loaded["seq"]}


# --- VFs: what sriov_numvfs asked for ----------------------------------------------------------


def pci_dir(pci: str) -> str:
    return f"{paths.SYS}/bus/pci/devices/{pci}"


def _requested(n: dict[str, Any]) -> int | None:
    try:
        with open(paths.p(pci_dir(n["pci_bus_id"]) + "/sriov_numvfs"), encoding="utf-8") as fh:
            return int(fh.read().strip() or "0")
    except (OSError, ValueError):
        return None


def create_vfs(node: Node, n: dict[str, Any], count: int) -> None:
    """Replace a PF's VFs by ``count`` new ones (new RDMA device names, as a real probe)."""
    by_pf = node.vstate.setdefault("vfs", {})
    seq = int(node.vstate.get("ib_seq", len(model.nic_list(node))))
    made = []
    for i in range(count):
        made.append(
            {"index": i, "pci": vf_pci(n, i), "netdev": vf_netdev(n, i), "hca": f"mlx5_{seq}"}
        )
        seq += 1
    node.vstate["ib_seq"] = seq
    by_pf[n["pci_bus_id"]] = made
    if count:
        kmsg.log(
            node, f"mlx5_core {n['pci_bus_id']}: mlx5_sriov_enable:{count} VFs enabled", kmsg.INFO
        )


def settle(node: Node) -> None:
    """Create or remove each PF's VFs as its sriov_numvfs now asks (the write's effect)."""
    if not nic.nics_visible(node):
        return
    for n in model.nic_list(node):
        want, have = _requested(n), len(vfs(node, n))
        if want is None or want == have:
            continue
        total = total_vfs(node, n)
        if not 0 <= want <= total:  # the write failed (ERANGE): the file keeps the old count
            kmsg.log(node, f"pci {n['pci_bus_id']}: {want} VFs requested; only {total} supported")
            state.write_atomic(pci_dir(n["pci_bus_id"]) + "/sriov_numvfs", f"{have}\n")
            continue
        create_vfs(node, n, want)


def destroy_vfs(node: Node, n: dict[str, Any]) -> int:
    """What a firmware reset does to a PF's VFs; returns how many there were."""
    had = len(vfs(node, n))
    node.vstate.setdefault("vfs", {})[n["pci_bus_id"]] = []
    state.write_atomic(pci_dir(n["pci_bus_id"]) + "/sriov_numvfs", "0\n")
    return had


def boot(node: Node) -> None:
    """A boot: the firmware's next values become current, no VF exists, configfs and the
    PCI devices' attributes start afresh (the caller reset the volatile state)."""
    for pci, fw in node.pstate.get("mlxconfig", {}).items():
        node.pstate["mlxconfig"][pci] = {"current": dict(fw["next"]), "next": dict(fw["next"])}
    from . import sriov_sysfs  # the files are built from this module's model

    sriov_sysfs.reset()


# --- faults (emu.faults hands these kinds here) ------------------------------------------------

FAULTS = ("vfs-gone", "rdma-netns-wrong", "no-v2-gid", "cm-tos-lossy")


def _device(node: Node, text: str) -> dict[str, Any]:
    for i, dev in enumerate(rdma_devices(node)):
        if text in (dev["hca"], dev["netdev"]) or (dev["pf"] is None and text == str(i)):
            return dev
    names = ", ".join(d["hca"] for d in rdma_devices(node)) or "none (is mlx5 loaded?)"
    raise EmuError(f"no RDMA device {text!r} (devices: {names})")


def fault_args(node: Node, kind: str, args: list[str], usage: str) -> list[str]:
    """Validate one of FAULTS' arguments and fill in defaults; the stored argument list."""
    devs = rdma_devices(node)
    if kind != "rdma-netns-wrong" and not devs:
        raise EmuError("no RDMA device: the mlx5 driver is not loaded")
    if kind == "vfs-gone":
        dev = _device(node, args[0]) if args else devs[0]
        if dev["pf"] is not None:
            raise EmuError(f"{dev['hca']} is a VF: name its rail")
        return [dev["hca"]]
    if kind == "rdma-netns-wrong":
        if args:
            raise EmuError(usage)
        return []
    if kind == "no-v2-gid":
        first_vf = next((d for d in devs if d["pf"] is not None), devs[0])
        return [(_device(node, args[0]) if args else first_vf)["netdev"]]
    dev = _device(node, args[0]) if args else devs[0]  # cm-tos-lossy
    tos = args[1] if len(args) > 1 else "0"
    if not tos.isdigit() or not 0 <= int(tos) <= 255 or len(args) > 2:
        raise EmuError(usage)
    return [dev["hca"], str(int(tos))]


def _tos_path(hca: str) -> str:
    return paths.p(f"{CONFIG}/rdma_cm/{hca}/ports/1/default_roce_tos")


def fault_add(node: Node, fault: dict[str, Any]) -> None:
    """The event a fault stands for; what it changed goes in fault["saved"] for clearing."""
    kind, args = fault["kind"], fault["args"]
    if kind == "vfs-gone":
        n = next(n for n in model.nic_list(node) if n["hca"] == args[0])
        fault["saved"] = destroy_vfs(node, n)
        kmsg.log(
            node, f"mlx5_core {n['pci_bus_id']}: firmware reset: SR-IOV disabled", kmsg.WARNING
        )
    elif kind == "rdma-netns-wrong":
        mode = netns_mode(node)
        if mode is None:
            raise EmuError("ib_core is not loaded")
        fault["saved"] = mode
        set_netns_mode(node, "exclusive" if mode == "shared" else "shared")
    elif kind == "cm-tos-lossy":
        from . import sriov_sysfs

        sriov_sysfs.render(node)  # the device's configfs group, should it be new
        with open(_tos_path(args[0]), encoding="utf-8") as fh:
            fault["saved"] = fh.read()
        state.write_atomic(f"{CONFIG}/rdma_cm/{args[0]}/ports/1/default_roce_tos", args[1] + "\n")


def fault_clear(node: Node, fault: dict[str, Any]) -> None:
    """Put back what fault_add changed, unless something set it again meanwhile."""
    kind, args, saved = fault["kind"], fault["args"], fault.get("saved")
    if kind == "vfs-gone" and saved:
        n = next(n for n in model.nic_list(node) if n["hca"] == args[0])
        if not vfs(node, n) and _requested(n) == 0:
            state.write_atomic(pci_dir(n["pci_bus_id"]) + "/sriov_numvfs", f"{saved}\n")
            create_vfs(node, n, int(saved))
    elif kind == "rdma-netns-wrong" and saved and netns_mode(node) not in (None, saved):
        set_netns_mode(node, str(saved))
    elif kind == "cm-tos-lossy" and saved is not None:
        try:
            with open(_tos_path(args[0]), encoding="utf-8") as fh:
                unchanged = fh.read().strip() == args[1]
        except FileNotFoundError:
            return  # the device went (a reboot, its VF removed): nothing to put back
        if unchanged:
            state.write_atomic(f"{CONFIG}/rdma_cm/{args[0]}/ports/1/default_roce_tos", saved)
