"""Emulated kernel modules: installed ones are /lib/modules/gpuemu/<mod>.ko (KEY=VALUE text,
written by the lab's packages), loaded ones live in the volatile state."""

from __future__ import annotations

import contextlib
import glob
import os
import zlib
from typing import Any

from . import kmsg, model, paths
from .state import Node

# In-tree modules of Debian's kernel that exist without any package (the NIC stack autoloads
# on a node with ConnectX cards; drm helpers are nvidia_drm's dependencies).
IN_TREE = {
    "ib_core",
    "ib_uverbs",
    "ib_umad",
    "ib_cm",
    "iw_cm",
    "rdma_cm",
    "rdma_ucm",
    "mlx5_core",
    "mlx5_ib",
    "mlxfw",
    "drm",
    "drm_kms_helper",
    "video",
    "i2c_algo_bit",
    "nvme",
    "nvme_core",
}
IN_TREE_DEPS = {
    "mlx5_ib": ["ib_uverbs", "ib_core", "mlx5_core"],
    "mlx5_core": ["mlxfw"],
    "ib_uverbs": ["ib_core"],
    "rdma_cm": ["iw_cm", "ib_cm", "ib_core"],
    "drm_kms_helper": ["drm"],
}
NIC_STACK = ["mlx5_core", "ib_core", "ib_uverbs", "mlx5_ib"]

# lsmod sizes of the real modules (535-era builds); others get a stable pseudo size.
SIZES = {
    "nvidia": 56602624,
    "nvidia_uvm": 1531904,
    "nvidia_modeset": 1306624,
    "nvidia_drm": 77824,
    "nvidia_peermem": 16384,
    "nvidia_fs": 262144,
    "gdrdrv": 24576,
    "mlx5_ib": 466944,
    "mlx5_core": 2215936,
    "ib_core": 450560,
    "ib_uverbs": 163840,
    "mlxfw": 36864,
    "drm": 614400,
    "drm_kms_helper": 212992,
    "nv_peer_mem": 16384,
}

DEFAULT_BUILD_DATE = "Tue Mar  5 22:42:15 UTC 2024"


def norm(name: str) -> str:
    """The kernel's module name: dashes and underscores are the same."""
    return name.replace("-", "_")


def release() -> str:
    return os.uname().release


def _parse(path: str) -> dict[str, str]:
    info: dict[str, str] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                info[key.strip()] = value.strip()
    return info


def installed(name: str) -> dict[str, str] | None:
    """The installed module file (or an in-tree module), None when there is none."""
    name = norm(name)
    for cand in (name, name.replace("_", "-")):
        path = paths.p(f"{paths.MODULES}/{cand}.ko")
        if os.path.isfile(path):
            info = _parse(path)
            info.setdefault("name", name)
            info["_file"] = f"/lib/modules/{release()}/updates/dkms/{cand}.ko"
            return info
    if name in IN_TREE:
        return {
            "name": name,
            "depends": ",".join(IN_TREE_DEPS.get(name, [])),
            "_file": f"/lib/modules/{release()}/kernel/drivers/{name}.ko",
            "_intree": "1",
        }
    return None


def all_installed() -> list[str]:
    files = glob.glob(paths.p(f"{paths.MODULES}/*.ko"))
    return sorted(norm(os.path.basename(f)[:-3]) for f in files)


def deps_of(info: dict[str, str]) -> list[str]:
    return [norm(d) for d in info.get("depends", "").split(",") if d.strip()]


def size_of(name: str, info: dict[str, str]) -> int:
    if info.get("size", "").isdigit():
        return int(info["size"])
    return SIZES.get(name, 16384 + 4096 * (zlib.crc32(name.encode()) % 64))


def loaded(node: Node) -> dict[str, dict[str, Any]]:
    mods: dict[str, dict[str, Any]] = node.vstate.setdefault("modules", {})
    return mods


def holders(node: Node, name: str) -> list[str]:
    mods = loaded(node)
    return sorted(
        (m for m, v in mods.items() if name in v.get("deps", [])), key=lambda m: -mods[m]["seq"]
    )


def extra_refs(node: Node, name: str) -> int:
    """Open file handles that pin a module: persistence mode and the NVIDIA daemons."""
    if name != "nvidia":
        return 0
    refs = 2 * sum(1 for v in node.vstate.get("persistence", {}).values() if v)
    for key in ("persistenced_pid", "fabricmanager_pid", "hostengine_pid"):
        if pid_alive(node.vstate.get(key)):
            refs += 1
    return refs


def pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ModError(Exception):
    pass


def load(node: Node, name: str, params: list[str] | None = None) -> None:
    """modprobe semantics: dependencies first; an already loaded module is left as it is."""
    name = norm(name)
    if name in loaded(node):
        return
    info = installed(name)
    if info is None:
        raise ModError(f"Module {name} not found in directory /lib/modules/{release()}")
    for dep in deps_of(info):
        load(node, dep)
    node.vstate["module_seq"] = int(node.vstate.get("module_seq", 0)) + 1
    loaded(node)[name] = {
        "version": info.get("version", ""),
        "flavor": info.get("flavor", ""),
        "deps": deps_of(info),
        "size": size_of(name, info),
        "seq": node.vstate["module_seq"],
        "builddate": info.get("builddate", DEFAULT_BUILD_DATE),
        "params": params or [],
    }
    _load_messages(node, name, info)


def unload(node: Node, name: str) -> None:
    """rmmod semantics: refuse while held by another module or by open handles."""
    name = norm(name)
    if name not in loaded(node):
        raise ModError(f"Module {name} is not currently loaded")
    users = holders(node, name)
    if users:
        raise ModError(f"Module {name} is in use by: {' '.join(users)}")
    if extra_refs(node, name):
        raise ModError(f"Module {name} is in use")
    del loaded(node)[name]
    if name == "nvidia":
        node.vstate["persistence"] = {}
        kmsg.log(node, "nvidia-nvlink: Unregistered Nvlink Core, major device number 237")


def remove_with_deps(node: Node, name: str) -> None:
    """modprobe -r: the module, then its dependencies that nothing else uses any more."""
    name = norm(name)
    info = loaded(node).get(name)
    if info is None:
        return
    unload(node, name)
    for dep in info.get("deps", []):
        if dep in loaded(node) and not holders(node, dep) and not extra_refs(node, dep):
            with contextlib.suppress(ModError):
                remove_with_deps(node, dep)


def _load_messages(node: Node, name: str, info: dict[str, str]) -> None:
    version = info.get("version", "")
    date = info.get("builddate", DEFAULT_BUILD_DATE)
    open_flavor = info.get("flavor", "") == "open"
    if name.startswith("nvidia") and not node.vstate.get("tainted"):
        node.vstate["tainted"] = True
        kmsg.log(node, f"{name}: loading out-of-tree module taints kernel.", kmsg.WARNING)
        if not open_flavor:
            kmsg.log(node, f"{name}: module license 'NVIDIA' taints kernel.", kmsg.WARNING)
            kmsg.log(node, "Disabling lock debugging due to kernel taint", kmsg.WARNING)
    if name == "nvidia":
        kmsg.log(node, "nvidia-nvlink: Nvlink Core is being initialized, major device number 237")
        for gpu in model.gpus(node):
            if gpu.lost:
                pci_id = "10de:" + model.gpu_hw(node)["pci_device_id"][2:6].lower()
                kmsg.log(
                    node,
                    f"NVRM: The NVIDIA GPU {gpu.bus4.lower()}\n"
                    f"NVRM: (PCI ID: {pci_id}) installed in this system has\n"
                    "NVRM: fallen off the bus and is not responding to commands.",
                    kmsg.ERR,
                )
                kmsg.log(
                    node, f"nvidia: probe of {gpu.bus4.lower()} failed with error -1", kmsg.WARNING
                )
            else:
                kmsg.log(node, f"nvidia {gpu.bus4.lower()}: enabling device (0000 -> 0002)")
        if open_flavor:
            kmsg.log(
                node,
                f"NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  {version}  "
                f"Release Build  (dvs-builder@U16-I3-B03-4-3)  {date}",
            )
        else:
            kmsg.log(node, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {version}  {date}")
    elif name == "nvidia_uvm":
        kmsg.log(node, "nvidia-uvm: Loaded the UVM driver, major device number 509.")
    elif name == "nvidia_modeset":
        kmsg.log(
            node,
            "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX "
            f"platforms  {version}  {date}",
        )
    elif name == "nvidia_drm":
        for i, gpu in enumerate(model.gpus(node)):
            kmsg.log(
                node,
                f"[drm] Initialized nvidia-drm 0.0.0 20160202 for {gpu.bus4.lower()} "
                f"on minor {i + 1}",
            )
    elif name == "mlx5_core":
        for nic in model.nic_list(node):
            kmsg.log(node, f"mlx5_core {nic['pci_bus_id']}: firmware version: {nic['firmware']}")
    elif name == "nvidia_fs":
        kmsg.log(node, f"nvidia_fs: Initializing nvfs driver module version {version}")


def proc_version_text(node: Node) -> str | None:
    """/proc/driver/nvidia/version exactly as the two driver flavors write it."""
    mod = loaded(node).get("nvidia")
    if not mod:
        return None
    version = model.module_version(node, "nvidia")
    date = mod.get("builddate", DEFAULT_BUILD_DATE)
    if mod.get("flavor") == "open":
        head = (
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release "
            f"Build  (dvs-builder@U16-I3-B03-4-3)  {date}"
        )
    else:
        head = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  {date}"
    return f"{head}\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"
