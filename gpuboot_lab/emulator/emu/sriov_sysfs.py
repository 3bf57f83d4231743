"""The files RDMA for pods shows, built from emu.sriov's model after every change: each NIC's
PCI directory (sriov_totalvfs, sriov_numvfs, virtfn<i> and physfn links), the netdevs' and RDMA
devices' class directories (MTU, GID table) and configfs rdma_cm groups. Settable attributes
(sriov_numvfs, mtu, default_roce_mode/tos) are created with their defaults and never
overwritten: writes go straight to them, as to the real attributes."""

from __future__ import annotations

import glob
import json
import os
import shutil
from typing import Any

from . import model, paths, state
from .sriov import CONFIG, gids, no_v2, pci_dir, rdma_devices, total_vfs, vf_netdev, vfs
from .state import Node

DEFAULT_MTU = "1500\n"
CM_MODE_DEFAULT = "RoCE v2\n"  # mlx5 ports that encapsulate RoCE in UDP default to v2
CM_TOS_DEFAULT = "0\n"
RENDERED = paths.RUN + "/sriov.rendered"  # what the files were last built from


def reset() -> None:
    """A boot: the PCI devices' attributes, the RDMA devices and configfs start afresh."""
    for tree in (f"{paths.SYS}/bus/pci", f"{paths.SYS}/class/infiniband", CONFIG + "/rdma_cm"):
        shutil.rmtree(paths.p(tree), ignore_errors=True)
    state.remove(RENDERED)


def _link(path: str, target_path: str) -> None:
    """A relative symlink at ``path`` to ``target_path`` (both in-node paths)."""
    real = paths.p(path)
    target = os.path.relpath(paths.p(target_path), os.path.dirname(real))
    if os.path.islink(real) and os.readlink(real) == target:
        return
    os.makedirs(os.path.dirname(real), exist_ok=True)
    if os.path.lexists(real):
        os.unlink(real)
    os.symlink(target, real)


def _write(path: str, text: str) -> None:
    real = paths.p(path)
    try:
        with open(real, encoding="utf-8") as fh:
            if fh.read() == text:
                return
    except FileNotFoundError:
        pass
    state.write_atomic(path, text)


def _ensure(path: str, text: str) -> None:
    """A settable attribute: created with its default, never overwritten."""
    if not os.path.exists(paths.p(path)):
        state.write_atomic(path, text)


def _prune(directory: str, keep: set[str]) -> None:
    real = paths.p(directory)
    if not os.path.isdir(real):
        return
    for name in set(os.listdir(real)) - keep:
        full = os.path.join(real, name)
        if os.path.islink(full) or not os.path.isdir(full):
            os.unlink(full)
        else:
            shutil.rmtree(full, ignore_errors=True)


def _render_dev(node: Node, dev: dict[str, Any], pci: str) -> None:
    ib = f"{paths.SYS}/class/infiniband/{dev['hca']}"
    net = f"{paths.SYS}/class/net/{dev['netdev']}"
    _ensure(net + "/mtu", DEFAULT_MTU)
    _link(net + "/device", pci_dir(pci))
    _link(f"{pci_dir(pci)}/net/{dev['netdev']}", net)
    _link(f"{pci_dir(pci)}/infiniband/{dev['hca']}", ib)
    _link(ib + "/device", pci_dir(pci))
    rows = gids(node, dev)
    port = ib + "/ports/1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        _prune(f"{port}/{sub}", {str(r[0]) for r in rows})
    for index, gid, _v4, ver in rows:
        _write(f"{port}/gids/{index}", gid + "\n")
        _write(
            f"{port}/gid_attrs/types/{index}", ("RoCE v2" if ver == "v2" else "IB/RoCE v1") + "\n"
        )
        _write(f"{port}/gid_attrs/ndevs/{index}", dev["netdev"] + "\n")
    cm = f"{CONFIG}/rdma_cm/{dev['hca']}/ports/1"
    _ensure(cm + "/default_roce_mode", CM_MODE_DEFAULT)
    _ensure(cm + "/default_roce_tos", CM_TOS_DEFAULT)


def render(node: Node) -> None:
    """Build the PCI, net, infiniband and configfs files from the state (skipped when
    nothing they depend on changed since the last build)."""
    devs = rdma_devices(node)
    sig = json.dumps(
        [
            [(d["hca"], d["netdev"], d.get("pci"), d["pf"] is None) for d in devs],
            [(n["pci_bus_id"], total_vfs(node, n)) for n in model.nic_list(node)],
            sorted(no_v2(node)),
            sorted(f["args"][0] for f in model.faults_of(node, "nic-down")),
        ]
    )
    try:
        with open(paths.p(RENDERED), encoding="utf-8") as fh:
            if fh.read() == sig:
                return
    except FileNotFoundError:
        pass
    pcis: set[str] = set()
    for n in model.nic_list(node):
        pf_dir = pci_dir(n["pci_bus_id"])
        pcis.add(n["pci_bus_id"])
        _write(pf_dir + "/sriov_totalvfs", f"{total_vfs(node, n)}\n")
        _ensure(pf_dir + "/sriov_numvfs", "0\n")
        made = vfs(node, n)
        _prune(pf_dir, {"sriov_totalvfs", "sriov_numvfs", "net", "infiniband"}
               | {f"virtfn{vf['index']}" for vf in made})  # fmt: skip
        for vf in made:
            pcis.add(vf["pci"])
            _link(f"{pf_dir}/virtfn{vf['index']}", pci_dir(vf["pci"]))
            _link(f"{pci_dir(vf['pci'])}/physfn", pf_dir)
    _prune(f"{paths.SYS}/bus/pci/devices", pcis)
    for dev in devs:
        _render_dev(node, dev, dev["pci_bus_id"] if dev["pf"] is None else dev["pci"])
    names = {d["hca"] for d in devs}
    _prune(f"{paths.SYS}/class/infiniband", names)
    _prune(CONFIG + "/rdma_cm", names)
    vf_nets = {d["netdev"] for d in devs if d["pf"] is not None}
    for n in model.nic_list(node):  # VF netdevs gone with their VFs
        for stale in glob.glob(paths.p(f"{paths.SYS}/class/net/{vf_netdev(n, 0)[:-1]}*")):
            if os.path.basename(stale) not in vf_nets:
                shutil.rmtree(stale, ignore_errors=True)
    state.write_atomic(RENDERED, sig)
