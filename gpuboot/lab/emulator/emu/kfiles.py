"""Kernel-side files checks read through gpuboot_procfs / gpuboot_sysfs (/run/gpuemu/proc|sys),
regenerated from the state after every change."""

from __future__ import annotations

import os
import shutil

from . import kmod, model, paths, state
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


def sync(node: Node) -> None:
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
