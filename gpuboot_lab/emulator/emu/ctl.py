"""The lab's back door: gpuemu ctl setup|boot|fault|status (never used by gpuboot over SSH)."""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from typing import Any

from . import faults, kfiles, kmod, kmsg, model, paths, sriov, state
from .state import EmuError, Node

# the kernel's and the bus's view (lspci reads the PCI bus: pciutils, not a driver package;
# rdma and ethtool ask the kernel over netlink; udevadm settle waits for its device events)
KERNEL_TOOLS = ["lsmod", "modprobe", "rmmod", "modinfo", "dmesg", "lspci", "rdma", "ethtool"]
KERNEL_TOOLS += ["udevadm"]
SBIN = "/usr/local/sbin"
UNIT = "/etc/systemd/system/gpuemu-boot.service"
UNIT_WANTS = "/etc/systemd/system/sysinit.target.wants/gpuemu-boot.service"
UNIT_TEXT = """\
[Unit]
Description=gpuboot lab: emulated GPU/NIC hardware comes up (module autoload, settings)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target systemd-modules-load.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/opt/gpuemu/gpuemu ctl boot

[Install]
WantedBy=sysinit.target
"""

USAGE = """usage: gpuemu ctl setup [--profile FILE.json]
       gpuemu ctl boot [--force]
       gpuemu ctl fault add KIND [ARGS...] [--survive-reboot]
       gpuemu ctl fault clear [KIND]
       gpuemu ctl fault list
       gpuemu ctl status
fault kinds:
""" + "".join(f"  {u}\n" for u in faults.USAGE.values())


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except EmuError as exc:
        sys.stderr.write(f"gpuemu: {exc}\n")
        return 2


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "setup":
        return setup(rest)
    if cmd == "boot":
        return boot("--force" in rest)
    if cmd == "status":
        print(json.dumps(status(state.load()), indent=2, sort_keys=True))
        return 0
    if cmd == "fault":
        return fault(rest)
    raise EmuError(f"unknown ctl command {cmd!r}\n{USAGE}")


def entry_script() -> str:
    return os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "gpuemu"))


def setup(argv: list[str]) -> int:
    if "--profile" in argv:
        src = argv[argv.index("--profile") + 1]
        with open(src, encoding="utf-8") as fh:
            prof = json.load(fh)
        state.write_json(paths.PROFILE, prof)
    state.load_profile()  # fail early without a profile
    for d in (paths.VARLIB, paths.RUN, paths.MODULES, paths.USERSPACE):
        os.makedirs(paths.p(d), exist_ok=True)
    with state.transaction() as node:
        ids = node.pstate.setdefault("gpus", {})
        for bus in model.bus_ids(node):
            ids.setdefault(bus, model.make_identity(node, bus))
        node.pstate["profile_name"] = node.profile.get("name")
    link_kernel_tools(replace=True)
    if not os.path.exists(paths.p(UNIT)):  # the lab image may ship its own
        state.write_atomic(UNIT, UNIT_TEXT)
    wants = paths.p(UNIT_WANTS)
    os.makedirs(os.path.dirname(wants), exist_ok=True)
    if not os.path.lexists(wants):
        os.symlink(UNIT, wants)
    if not state.load().vstate.get("booted"):
        boot(force=True)
    return 0


def link_kernel_tools(replace: bool = False) -> None:
    """Kernel-side tools go ahead of /usr/sbin on root's PATH; with GPUEMU_ROOT they stay
    inside the test root. Boot adds the ones a node image made before them lacks (lspci)."""
    target = entry_script() if paths.root() else "/opt/gpuemu/gpuemu"
    os.makedirs(paths.p(SBIN), exist_ok=True)
    for tool in KERNEL_TOOLS:
        link = paths.p(f"{SBIN}/{tool}")
        exists = os.path.islink(link) or os.path.exists(link)
        if exists and not replace:
            continue
        if exists:
            os.unlink(link)
        os.symlink(target, link)


def container_start_time() -> float:
    """Wall-clock start of PID 1: a container restart is this node's boot."""
    if paths.root():
        return time.time() - 5.0
    try:
        with open("/proc/1/stat", encoding="ascii") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


# PCI vendor:device of the NICs, by CA type (pci.ids)
NIC_PCI = {
    "MT4123": "15b3:101b",
    "MT4124": "15b3:101c",
    "MT4125": "15b3:101d",
    "MT4126": "15b3:101e",
    "MT4129": "15b3:1021",
    "MT41692": "15b3:a2dc",
}


def boot(force: bool = False) -> int:
    try:
        link_kernel_tools()
    except OSError as exc:  # a read-only /usr/local: the node still boots
        sys.stderr.write(f"gpuemu: kernel tools not linked: {exc}\n")
    with state.transaction() as node:
        if node.vstate.get("booted") and not force:
            return 0
        kmsg.clear()
        kfiles.reset_net_class()
        node.vstate = state.new_vstate()
        node.vstate["boot_time"] = container_start_time()
        node.pstate["boot_count"] = int(node.pstate.get("boot_count", 0)) + 1
        for mode in node.pstate.get("mig_mode", {}).values():
            mode["current"] = mode.get("pending", mode.get("current", False))
        _boot_messages(node)
        for fault in node.pstate.get("faults", []):
            if fault["kind"] != "xid":
                faults.trace(node, fault)
        for name in autoload_list(node):
            try:
                kmod.load(node, name)
            except kmod.ModError as exc:
                kmsg.log(
                    node, f"systemd-modules-load: Failed to find module '{name}' ({exc})", kmsg.ERR
                )
        for fault in node.pstate.get("faults", []):
            if fault["kind"] == "xid" and fault["args"][0] != "79":
                faults.trace(node, fault)
        sriov.boot(node)
        node.vstate["booted"] = True
    return 0


def _boot_messages(node: Node) -> None:
    at = float(node.vstate["boot_time"])
    kmsg.log(
        node,
        f"Linux version {kmod.release()} (debian-kernel@lists.debian.org) "
        "(gcc-12 (Debian 12.2.0-14) 12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP "
        "PREEMPT_DYNAMIC Debian",
        kmsg.NOTICE,
        at=at,
    )
    dev = model.gpu_hw(node)["pci_device_id"][2:6].lower()
    for i, gpu in enumerate(model.gpus(node)):
        kmsg.log(
            node,
            f"pci {gpu.bus4.lower()}: [10de:{dev}] type 00 class 0x030200",
            at=at + 0.41 + i * 0.002,
        )
    for i, nic in enumerate(model.nic_list(node)):
        kmsg.log(
            node,
            f"pci {nic['pci_bus_id']}: [{NIC_PCI.get(nic['ca_type'], '15b3:1021')}] "
            "type 00 class 0x020000",
            at=at + 0.43 + i * 0.002,
        )


# What udev and the driver packages load at boot on a real node: the drivers of devices
# present (GPU -> nvidia plus the companions NVIDIA's packages pull in, ConnectX ->
# mlx5). Optional modules (nvidia_peermem, nvidia_fs, gdrdrv, rdma_cm...) need
# /etc/modules-load.d or a service, as on real nodes.
GPU_AUTOLOAD = ["nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm"]


def autoload_list(node: Node) -> list[str]:
    """Modules the node loads at boot, in order."""
    blacklist: set[str] = set()
    for conf in glob.glob(paths.p("/etc/modprobe.d/*.conf")):
        with open(conf, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                words = line.split()
                if len(words) >= 2 and words[0] == "blacklist":
                    blacklist.add(kmod.norm(words[1]))
    names: list[str] = []
    if model.nic_list(node):
        names += kmod.NIC_STACK
    installed = kmod.all_installed()
    names += [m for m in GPU_AUTOLOAD if m in installed]
    for name in installed:
        if ((kmod.installed(name) or {}).get("autoload", "")).lower() in ("yes", "true", "1"):
            names.append(name)
    names = [n for n in names if n not in blacklist]
    for conf in sorted(glob.glob(paths.p("/etc/modules-load.d/*.conf"))):
        with open(conf, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                word = line.split("#", 1)[0].strip()
                if word:
                    names.append(kmod.norm(word))
    seen: set[str] = set()
    return [n for n in names if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]


def fault(argv: list[str]) -> int:
    if not argv:
        raise EmuError(USAGE)
    op, rest = argv[0], argv[1:]
    if op == "add":
        survive = "--survive-reboot" in rest
        rest = [a for a in rest if a != "--survive-reboot"]
        if not rest:
            raise EmuError(USAGE)
        with state.transaction() as node:
            added = faults.add(node, rest[0], rest[1:], survive)
        print(json.dumps(added, sort_keys=True))
        return 0
    if op == "clear":
        with state.transaction() as node:
            n = faults.clear(node, rest[0] if rest else None)
        print(json.dumps({"cleared": n}))
        return 0
    if op == "list":
        print(json.dumps(state.load().faults, indent=2, sort_keys=True))
        return 0
    raise EmuError(f"unknown fault operation {op!r}\n{USAGE}")


def status(node: Node) -> dict[str, Any]:
    mods = kmod.loaded(node)
    return {
        "profile": node.profile.get("name"),
        "booted": bool(node.vstate.get("booted")),
        "boot_count": node.pstate.get("boot_count", 0),
        "boot_time": node.vstate.get("boot_time"),
        "modules": {m: model.module_version(node, m) or "" for m in mods},
        "installed_modules": {
            m: (kmod.installed(m) or {}).get("version", "") for m in kmod.all_installed()
        },
        "userspace": {
            os.path.basename(f)[:-8]: model.read_userspace(os.path.basename(f)[:-8])
            for f in sorted(glob.glob(paths.p(paths.USERSPACE + "/*.version")))
        },
        "faults": node.faults,
        "gpus": [
            {
                "index": g.index,
                "slot": g.slot,
                "bus_id": g.bus_id,
                "uuid": g.uuid,
                "serial": g.serial,
                "lost": g.lost,
                "persistence": g.persistence,
                "mig": {"current": g.mig_current, "pending": g.mig_pending},
                "pcie": f"gen{g.pcie_gen}x{g.pcie_width}",
                "nvlinks_active": sum(g.links),
            }
            for g in model.gpus(node)
        ],
        "daemons": {
            k: kmod.pid_alive(node.vstate.get(k + "_pid"))
            for k in ("persistenced", "fabricmanager", "imex", "hostengine")
        },
    }
