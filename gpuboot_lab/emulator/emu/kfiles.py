"""Kernel-side files checks read through gpuboot_procfs / gpuboot_sysfs (/run/gpuemu/proc|sys),
regenerated from the state after every change."""

from __future__ import annotations

import os
import shutil

from . import kmod, model, nic, paths, sriov_sysfs, state
from .state import Node


def _write(path: str, text: str) -> None:
    real = paths.p(path)
    try:
        with open(real, encoding="utf-8") as fh:
            if fh.read() == text:
                return  # unchanged: keep mtimes stable for watchers
    except FileNotFoundError:
        pass
    state.write_atomic(path, text)


# mlx5 RoCE congestion control (DCQCN) switches, per netdev, per protocol, per priority:
# /sys/class/net/<netdev>/ecn/<roce_np|roce_rp>/enable/<0..7>, "1" or "0". Writes go
# straight to these files (as to the real attributes), so sync only creates what is
# missing and drops them while the driver is unloaded; a boot starts from the default.
ECN_PROTOCOLS = ("roce_np", "roce_rp")
ECN_DEFAULT = "0\n"


def ecn_dir(netdev: str) -> str:
    return f"{paths.SYS}/class/net/{netdev}/ecn"


def reset_net_class() -> None:
    """Driver attributes do not outlive the kernel: a boot drops them."""
    shutil.rmtree(paths.p(paths.SYS + "/class/net"), ignore_errors=True)


def _sync_ecn(node: Node) -> None:
    visible = {n["netdev"] for n in nic.nics_visible(node) if n["link_layer"] == "Ethernet"}
    for n in model.nic_list(node):
        if n["netdev"] not in visible:
            shutil.rmtree(paths.p(ecn_dir(n["netdev"])), ignore_errors=True)
            continue
        for proto in ECN_PROTOCOLS:
            for prio in range(8):
                path = paths.p(f"{ecn_dir(n['netdev'])}/{proto}/enable/{prio}")
                if not os.path.exists(path):
                    state.write_atomic(f"{ecn_dir(n['netdev'])}/{proto}/enable/{prio}", ECN_DEFAULT)


def sync(node: Node) -> None:
    _sync_ecn(node)
    sriov_sysfs.render(node)
    mods = kmod.loaded(node)
    sys_module = paths.p(paths.SYS + "/module")
    os.makedirs(sys_module, exist_ok=True)
    for stale in set(os.listdir(sys_module)) - set(mods):
        shutil.rmtree(os.path.join(sys_module, stale), ignore_errors=True)
    for name in mods:
        base = f"{paths.SYS}/module/{name}"
        version = model.module_version(node, name) or ""
        if version:
            _write(f"{base}/version", version + "\n")
        else:
            state.remove(f"{base}/version")
        _write(f"{base}/initstate", "live\n")
        refs = len(kmod.holders(node, name)) + kmod.extra_refs(node, name)
        _write(f"{base}/refcnt", f"{refs}\n")

    nv_dir = paths.PROC + "/driver/nvidia"
    text = kmod.proc_version_text(node)
    if text is None:
        shutil.rmtree(paths.p(nv_dir), ignore_errors=True)
        return
    _write(f"{nv_dir}/version", text)
    gpus_dir = paths.p(nv_dir + "/gpus")
    present = {g.bus4.lower(): g for g in model.gpus(node) if not g.lost}
    if os.path.isdir(gpus_dir):
        for stale in set(os.listdir(gpus_dir)) - set(present):
            shutil.rmtree(os.path.join(gpus_dir, stale), ignore_errors=True)
    for bus, gpu in present.items():
        _write(
            f"{nv_dir}/gpus/{bus}/information",
            (
                f"Model: \t\t {gpu.name}\n"
                f"IRQ:   \t\t {150 + gpu.slot}\n"
                f"GPU UUID: \t {gpu.uuid}\n"
                f"Video BIOS: \t {str(gpu.hw['vbios']).lower()}\n"
                "Bus Type: \t PCIe\n"
                "DMA Size: \t 52 bits\n"
                "DMA Mask: \t 0xfffffffffffff\n"
                f"Bus Location: \t {bus}\n"
                f"Device Minor: \t {gpu.slot}\n"
                "GPU Excluded:\t No\n"
            ),
        )
