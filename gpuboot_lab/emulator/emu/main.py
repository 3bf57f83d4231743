"""Dispatch on the name the emulator was started as (symlinks carry the real tools' names)."""

from __future__ import annotations

import importlib
import os
import sys

from .state import EmuError

# tool name -> (module, function); modules are imported lazily so each shim starts fast
TOOLS: dict[str, tuple[str, str]] = {
    "ctl": ("ctl", "main"),
    "lsmod": ("kernel", "lsmod"),
    "modprobe": ("kernel", "modprobe"),
    "rmmod": ("kernel", "rmmod"),
    "modinfo": ("kernel", "modinfo"),
    "dmesg": ("kernel", "dmesg"),
    "journalctl": ("kernel", "journalctl"),  # -k only: the kernel log in journald's format
    "nvidia-smi": ("smi", "main"),
    "nvidia-persistenced": ("persistenced", "main"),
    "nv-fabricmanager": ("daemons", "fabricmanager"),
    "nvidia-imex": ("daemons", "imex"),
    "nv-hostengine": ("daemons", "hostengine"),
    "nvidia-ctk": ("daemons", "ctk"),
    "dcgmi": ("dcgmi", "main"),
    "lspci": ("lspci", "main"),
    "ibstat": ("nic", "ibstat"),
    "ibv_devinfo": ("nic", "ibv_devinfo"),
    "ibstatus": ("nic", "ibstatus"),
    "mlnx_qos": ("nic", "mlnx_qos"),
    "rdma": ("roce", "rdma"),
    "show_gids": ("roce", "show_gids"),
    "ethtool": ("roce", "ethtool"),
    "udevadm": ("rdma_tools", "udevadm"),  # settle: the VFs written for come up
    "mlxconfig": ("rdma_tools", "mlxconfig"),
    "cma_roce_mode": ("rdma_tools", "cma_roce_mode"),
    "cma_roce_tos": ("rdma_tools", "cma_roce_tos"),
    "ib_write_bw": ("ibbw", "main"),
    "nvbandwidth": ("probes", "nvbandwidth"),
    "all_reduce_perf": ("probes", "all_reduce_perf"),
    "serve": ("serve", "main"),  # the warm emulator the shims hand calls to (emu.client)
}


def main(argv: list[str]) -> int:
    name = os.path.basename(argv[0])
    args = argv[1:]
    if name not in TOOLS:
        if not args or args[0] in ("-h", "--help"):
            sys.stdout.write("usage: gpuemu TOOL [ARGS...]\ntools: " + " ".join(TOOLS) + "\n")
            return 0 if args else 2
        name, args = args[0], args[1:]
    if name not in TOOLS:
        sys.stderr.write(f"gpuemu: unknown tool {name!r}\n")
        return 127
    module, func = TOOLS[name]
    try:
        mod = importlib.import_module(f"emu.{module}")
        rc = getattr(mod, func)(args)
    except EmuError as exc:
        sys.stderr.write(f"{name}: {exc}\n")
        return 2
    except BrokenPipeError:
        return 141
    sys.stdout.flush()
    return int(rc or 0)
