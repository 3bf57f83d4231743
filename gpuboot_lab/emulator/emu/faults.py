"""Fault kinds: argument checks and the kernel-log traces a real fault leaves when it happens.

The effect of a fault on the tools is computed by the model from the active fault list, so
clearing a fault restores the healthy view at once (the kernel log keeps its history).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from typing import Any

from . import kmsg, model, paths, xid
from .state import EmuError, Node

PROBES = ("nvbandwidth", "all_reduce_perf", "ib_write_bw")

# kind -> usage; the first GPU/NIC argument defaults to 0 / the first NIC where optional
USAGE = {
    "xid": "xid CODE [GPU]",
    "driver-mismatch": "driver-mismatch [KERNEL_MODULE_VERSION]",
    "gpu-missing": "gpu-missing [GPU]   (off the PCI bus: lspci does not list it either)",
    "gpu-unbound": "gpu-unbound [GPU]   (on the PCI bus, the driver failed to bring it up)",
    "nvlink-down": "nvlink-down GPU [LINK]   (no LINK: all links of the GPU)",
    "nvlink-crc-growth": "nvlink-crc-growth GPU LINK [PER_MINUTE]   (the link's CRC error count "
    "grows PER_MINUTE a minute (default 600) from the fault or the last boot, whichever is later: "
    "a reboot restarts it at 0)",
    "pcie-downtrain": "pcie-downtrain GPU GEN WIDTH",
    "ecc-uncorrectable": "ecc-uncorrectable [GPU]",
    "remap-pending": "remap-pending [GPU]",
    "remap-failed": "remap-failed [GPU]",
    "thermal-throttle": "thermal-throttle [GPU]",
    "fabricmanager-fails": "fabricmanager-fails",
    "nic-down": "nic-down [HCA|NETDEV]",
    "qos-drift": "qos-drift [HCA|NETDEV]",
    "nic-swap": "nic-swap NIC NIC   (two cards in each other's slot: each beside the other's GPU)",
    "gpu-process": "gpu-process GPU [NAME] [MIB]   (a compute process left on the GPU)",
    "low-bandwidth": "low-bandwidth PROBE FACTOR [HCA|NETDEV]   (PROBE: "
    + "|".join(PROBES)
    + "; a NIC only for ib_write_bw: that rail alone)",
    "probe-hang": "probe-hang PROBE   (PROBE never returns and ignores `timeout`'s SIGTERM, as a "
    "tool stuck in the kernel does: only the controller's deadline ends the wait)",
    "vfs-gone": "vfs-gone [HCA|NETDEV]   (a firmware reset takes the rail's VFs (default the first "
    "rail) until sriov_numvfs is written again; clearing puts them back if nothing did)",
    "rdma-netns-wrong": "rdma-netns-wrong   (the RDMA subsystem flips to the other namespace mode, "
    "shared <-> exclusive; clearing flips it back if nothing set it meanwhile)",
    "no-v2-gid": "no-v2-gid [HCA|NETDEV]   (that port or VF has no RoCE v2 GID; default the first "
    "rail's first VF, the rail itself without VFs)",
    "cm-tos-lossy": "cm-tos-lossy [HCA] [TOS]   (RDMA CM's default ToS of that device (default the "
    "first rail) becomes TOS (default 0: best effort, a lossy queue); clearing restores it if "
    "unchanged)",
    "gpu-err": "gpu-err [GPU]   (NVML lost the GPU: the nvidia-smi table shows ERR! in its row, "
    "-q, -L and --query-gpu cannot open it, CUDA does not list it)",
    "perftest-abort": "perftest-abort [STATUS]   (ib_write_bw on this node prints the rows of the "
    "sizes it finished, then a completion error with STATUS (default 10, remote access error) "
    "and 'Failed to complete run_iter_bw', exit 1)",
    "nvbandwidth-assert": "nvbandwidth-assert [TESTCASE]   (nvbandwidth stops at TESTCASE "
    "(default device_to_device_memcpy_read_ce) on its pattern check's ASSERT, exit 1)",
    "runfile-driver": "runfile-driver [VERSION]   (what NVIDIA's .run installer leaves, no package "
    "owning it: /usr/bin/nvidia-installer, its log, kernel/drivers/video/nvidia.ko; "
    "`nvidia-installer --uninstall` removes them; survives reboots)",
}
# The files a .run install leaves (NVIDIA's README, "Installing the NVIDIA Driver"); the
# module sits in the emulator's own module tree, as /lib/modules/<release>/ on a real node.
RUNFILE_FILES = (
    "/usr/bin/nvidia-installer",
    "/var/log/nvidia-installer.log",
    paths.MODULES + "/kernel/drivers/video/nvidia.ko",
)
_GPUEMU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpuemu")


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise EmuError(f"{what} must be an integer, got {text!r}") from None


def _gpu(node: Node, text: str) -> int:
    n = int(model.gpu_hw(node)["count"])
    slot = _int(text, "GPU")
    if not 0 <= slot < n:
        raise EmuError(f"GPU {slot} out of range: this profile has GPUs 0-{n - 1}")
    return slot


def find_nic(node: Node, text: str) -> dict[str, Any]:
    for i, nic in enumerate(model.nic_list(node)):
        if text in (nic["hca"], nic.get("netdev"), str(i)):
            return nic
    names = ", ".join(n["hca"] for n in model.nic_list(node)) or "none"
    raise EmuError(f"no NIC {text!r} in this profile (NICs: {names})")


def normalise(node: Node, kind: str, args: list[str]) -> list[str]:
    """Validate a fault's arguments and fill in defaults; returns the stored argument list."""
    if kind not in USAGE:
        raise EmuError(f"unknown fault kind {kind!r}; known: {', '.join(USAGE)}")
    usage = f"usage: gpuemu ctl fault add {USAGE[kind]}"
    if kind == "xid":
        if not args:
            raise EmuError(usage)
        code = _int(args[0], "CODE")
        return [str(code), str(_gpu(node, args[1]) if len(args) > 1 else 0)]
    if kind == "driver-mismatch":
        return args[:1]
    if kind in (
        "gpu-missing",
        "gpu-unbound",
        "ecc-uncorrectable",
        "remap-pending",
        "remap-failed",
        "thermal-throttle",
        "gpu-err",
    ):
        return [str(_gpu(node, args[0]) if args else 0)]
    if kind == "perftest-abort":  # an ibv_wc_status other than IBV_WC_SUCCESS (0)
        status = _int(args[0], "STATUS") if args else 10
        if len(args) > 1 or not 1 <= status <= 21:
            raise EmuError(usage + "   (STATUS: an ibv_wc_status, 1-21)")
        return [str(status)]
    if kind == "nvbandwidth-assert":
        from .probes import NVBW_TESTS  # probes reads faults: imported when needed

        names = [t[0] for t in NVBW_TESTS]
        case = args[0] if args else "device_to_device_memcpy_read_ce"
        if len(args) > 1 or case not in names:
            raise EmuError(f"{usage}   (TESTCASE: one of {', '.join(names)})")
        return [case]
    if kind == "nvlink-down":
        links = int(model.hw(node).get("nvlink", {}).get("links_per_gpu", 0) or 0)
        if not links:
            raise EmuError("this profile has no NVLink")
        if not args:
            raise EmuError(usage)
        slot = _gpu(node, args[0])
        if len(args) > 1:
            link = _int(args[1], "LINK")
            if not 0 <= link < links:
                raise EmuError(f"LINK {link} out of range: GPUs have links 0-{links - 1}")
            return [str(slot), str(link)]
        return [str(slot)]
    if kind == "nvlink-crc-growth":
        links = int(model.hw(node).get("nvlink", {}).get("links_per_gpu", 0) or 0)
        if not links:
            raise EmuError("this profile has no NVLink")
        if len(args) < 2:
            raise EmuError(usage)
        slot, link = _gpu(node, args[0]), _int(args[1], "LINK")
        if not 0 <= link < links:
            raise EmuError(f"LINK {link} out of range: GPUs have links 0-{links - 1}")
        rate = _int(args[2], "PER_MINUTE") if len(args) > 2 else 600
        if rate < 1:
            raise EmuError("PER_MINUTE must be at least 1")
        return [str(slot), str(link), str(rate)]
    if kind == "pcie-downtrain":
        if len(args) < 3:
            raise EmuError(usage)
        gen_max = int(model.gpu_hw(node)["pcie"]["gen_max"])
        gen, width = _int(args[1], "GEN"), _int(args[2], "WIDTH")
        if not 1 <= gen <= gen_max:
            raise EmuError(f"GEN must be 1-{gen_max}")
        if width not in (1, 2, 4, 8, 16):
            raise EmuError("WIDTH must be one of 1, 2, 4, 8, 16")
        return [str(_gpu(node, args[0])), str(gen), str(width)]
    if kind in ("nic-down", "qos-drift"):
        if not model.nic_list(node):
            raise EmuError("this profile has no NICs")
        nic = find_nic(node, args[0]) if args else model.nic_list(node)[0]
        return [nic["hca"]]
    if kind == "nic-swap":
        if len(args) != 2:
            raise EmuError(usage)
        a, b = find_nic(node, args[0])["hca"], find_nic(node, args[1])["hca"]
        if a == b:
            raise EmuError("nic-swap needs two different NICs")
        return [a, b]
    if kind == "gpu-process":
        if not args:
            raise EmuError(usage)
        slot = _gpu(node, args[0])
        name = args[1] if len(args) > 1 else "/usr/bin/python3"
        mib = _int(args[2], "MIB") if len(args) > 2 else 9212
        pid = 100000 + 1000 * slot + len(model.faults_of(node, kind))
        return [str(slot), name, str(mib), str(pid)]
    if kind == "low-bandwidth":
        if len(args) < 2 or args[0] not in PROBES:
            raise EmuError(usage)
        try:
            factor = float(args[1])
        except ValueError:
            raise EmuError(f"FACTOR must be a number, got {args[1]!r}") from None
        if not 0.0 < factor <= 1.0:
            raise EmuError("FACTOR must be in (0, 1]: the fraction of healthy bandwidth left")
        if len(args) > 2:
            if args[0] != "ib_write_bw":
                raise EmuError(usage)
            return [args[0], str(factor), find_nic(node, args[2])["hca"]]
        return [args[0], str(factor)]
    if kind == "probe-hang":
        if len(args) != 1 or args[0] not in PROBES:
            raise EmuError(usage)
        return args[:1]
    if kind in ("vfs-gone", "rdma-netns-wrong", "no-v2-gid", "cm-tos-lossy"):
        from . import sriov  # the RDMA-for-pods model knows its devices

        return sriov.fault_args(node, kind, args, usage)
    if kind == "runfile-driver":
        version = args[0] if args else "550.54.15"
        if len(args) > 1 or not re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
            raise EmuError(usage)
        return [version]
    return []


def _runfile_write(version: str) -> None:
    """The .run installer's files; its nvidia-installer's --uninstall clears the fault."""
    texts = {
        "/usr/bin/nvidia-installer": (
            "#!/bin/sh\n# gpuemu: the .run installer left by fault runfile-driver\n"
            'case " $* " in *" --uninstall "*) exec '
            f"{_GPUEMU} ctl fault clear runfile-driver >/dev/null ;; esac\n"
            'echo "nvidia-installer (gpuemu): only --uninstall is emulated" >&2\nexit 1\n'
        ),
        "/var/log/nvidia-installer.log": (
            "nvidia-installer log file '/var/log/nvidia-installer.log'\n"
            f"creation time: {time.strftime('%a %b %d %H:%M:%S %Y')}\n"
            f"installer version: {version}\n"
        ),
        paths.MODULES + "/kernel/drivers/video/nvidia.ko": f"version={version}\n",
    }
    for path, text in texts.items():
        real = paths.p(path)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        with open(real, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(real, 0o755 if path.endswith("installer") else 0o644)


def _runfile_remove() -> None:
    for path in RUNFILE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(paths.p(path))


def _trace_xid(node: Node, args: list[str]) -> None:
    gpu = model.gpu_by_slot(node, int(args[1]))
    if gpu is not None:
        xid.emit(node, int(args[0]), gpu)


def _trace_gpu_xids(*codes: int) -> Callable[[Node, list[str]], None]:
    def hook(node: Node, args: list[str]) -> None:
        gpu = model.gpu_by_slot(node, int(args[0]))
        if gpu is not None:
            for code in codes:
                xid.emit(node, code, gpu)

    return hook


def _trace_nvlink(node: Node, args: list[str]) -> None:
    gpu = model.gpu_by_slot(node, int(args[0]))
    if gpu is not None:
        xid.emit(node, 74, gpu, int(args[1]) if len(args) > 1 else 0)


# Per-lane rate in Mb/s after encoding, as the kernel's PCIE_SPEED2MBS_ENC computes it.
LANE_MBPS = {1: 2000, 2: 4000, 3: 7876, 4: 15753, 5: 31507, 6: 63015}
GTS = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}


def pcie_limited_line(gpu: model.Gpu, gen: int, width: int) -> str:
    avail = LANE_MBPS[gen] * width
    cap = LANE_MBPS[gpu.pcie_gen_max] * gpu.pcie_width_max
    upstream = f"{gpu.bus4[:5]}{int(gpu.bus_id[9:11], 16) - 1:02x}:00.0"
    return (
        f"pci {gpu.bus4.lower()}: {avail // 1000}.{avail % 1000:03d} Gb/s available PCIe "
        f"bandwidth, limited by {GTS[gen]} GT/s PCIe x{width} link at {upstream} "
        f"(capable of {cap // 1000}.{cap % 1000:03d} Gb/s with {GTS[gpu.pcie_gen_max]} "
        f"GT/s PCIe x{gpu.pcie_width_max} link)"
    )


def _trace_pcie(node: Node, args: list[str]) -> None:
    gpu = model.gpu_by_slot(node, int(args[0]))
    if gpu is not None:
        kmsg.log(node, pcie_limited_line(gpu, int(args[1]), int(args[2])), kmsg.INFO)


def _trace_nic_down(node: Node, args: list[str]) -> None:
    nic = find_nic(node, args[0])
    kmsg.log(node, f"mlx5_core {nic['pci_bus_id']} {nic.get('netdev', '')}: Link down", kmsg.INFO)


def _trace_unbound(node: Node, args: list[str]) -> None:
    # what the driver logs when it cannot initialise a GPU it found on the bus
    gpu = model.gpu_by_slot(node, int(args[0]))
    if gpu is not None:
        kmsg.log(node, f"NVRM: GPU {gpu.bus4.lower()}: RmInitAdapter failed! (0x22:0x56:667)")
        kmsg.log(
            node, f"NVRM: GPU {gpu.bus4.lower()}: rm_init_adapter failed, device minor number 0"
        )


def _trace_mismatch(node: Node, args: list[str]) -> None:
    client = model.read_userspace("nvml") or "unknown"
    kernel = model.module_version(node, "nvidia") or (args[0] if args else "unknown")
    kmsg.log(
        node,
        f"NVRM: API mismatch: the client has the version {client}, but\n"
        f"NVRM: this kernel module has the version {kernel}.  Please\n"
        "NVRM: make sure that this kernel module and all NVIDIA driver\n"
        "NVRM: components have the same version.",
        kmsg.ERR,
    )


TRACES: dict[str, Callable[[Node, list[str]], None]] = {
    "xid": _trace_xid,
    "nvlink-down": _trace_nvlink,
    "pcie-downtrain": _trace_pcie,
    "ecc-uncorrectable": _trace_gpu_xids(48, 63),
    "remap-pending": _trace_gpu_xids(63),
    "remap-failed": _trace_gpu_xids(64),
    "nic-down": _trace_nic_down,
    "driver-mismatch": _trace_mismatch,
    "gpu-unbound": _trace_unbound,
}


def add(node: Node, kind: str, args: list[str], survive_reboot: bool) -> dict[str, Any]:
    args = normalise(node, kind, args)
    node.pstate["fault_seq"] = int(node.pstate.get("fault_seq", 0)) + 1
    fault = {
        "id": node.pstate["fault_seq"],
        "kind": kind,
        "args": args,
        "survive_reboot": survive_reboot,
        "added": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if kind == "qos-drift":
        from . import nic

        fault["saved"] = nic.drift(node, args[0])
    if kind in ("vfs-gone", "rdma-netns-wrong", "cm-tos-lossy"):
        from . import sriov

        sriov.fault_add(node, fault)
    if kind == "runfile-driver":  # files on disk outlive a reboot: so does the fault
        _runfile_write(args[0])
        fault["survive_reboot"] = survive_reboot = True
    (node.pstate if survive_reboot else node.vstate).setdefault("faults", []).append(fault)
    trace(node, fault)
    return fault


def trace(node: Node, fault: dict[str, Any]) -> None:
    hook = TRACES.get(fault["kind"])
    if hook is None:
        return
    # NVRM lines need the driver; PCIe and NIC link events are logged by the kernel itself.
    if fault["kind"] not in ("pcie-downtrain", "nic-down") and "nvidia" not in node.vstate.get(
        "modules", {}
    ):
        return
    hook(node, fault["args"])


def clear(node: Node, kind: str | None) -> int:
    if kind is not None and kind not in USAGE:
        raise EmuError(f"unknown fault kind {kind!r}; known: {', '.join(USAGE)}")
    removed = 0
    for store in (node.pstate, node.vstate):
        keep = [f for f in store.get("faults", []) if kind is not None and f["kind"] != kind]
        for gone in (f for f in store.get("faults", []) if f not in keep):
            if gone["kind"] == "qos-drift" and "saved" in gone:
                from . import nic

                nic.undrift(node, gone["args"][0], gone["saved"])
            if gone["kind"] == "runfile-driver":
                _runfile_remove()
            if gone["kind"] in ("vfs-gone", "rdma-netns-wrong", "cm-tos-lossy"):
                from . import sriov

                sriov.fault_clear(node, gone)
        removed += len(store.get("faults", [])) - len(keep)
        store["faults"] = keep
    return removed
