"""nvidia-smi nvlink -s|--status and -e|--errorcounters."""

from __future__ import annotations

import sys
import time
from datetime import datetime

from . import model, smi, state


def _speed(gbps: float) -> str:
    # nvidia-smi prints "25 GB/s" on A100 and "26.562 GB/s" on H100: %g keeps both
    return f"{gbps:g} GB/s"


def crc_growth(node: state.Node, now: float | None = None) -> dict[tuple[int, int], int]:
    """(GPU slot, link) -> the CRC errors an nvlink-crc-growth fault has added by ``now``:
    PER_MINUTE a minute since the fault or the node's last boot, whichever is later, so a
    reboot restarts the count at 0 as the driver's counters do."""
    now = time.time() if now is None else now
    booted = float(node.vstate.get("boot_time", 0) or 0)
    out: dict[tuple[int, int], int] = {}
    for fault in model.faults_of(node, "nvlink-crc-growth"):
        slot, link, rate = (int(a) for a in fault["args"][:3])
        try:
            added = datetime.strptime(fault["added"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except (KeyError, ValueError):
            added = booted
        since = max(added, booted)
        out[(slot, link)] = out.get((slot, link), 0) + int(rate * max(0.0, now - since) / 60)
    return out


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except smi.Exit as exc:
        return exc.rc


def _main(argv: list[str]) -> int:
    node = state.load()
    smi.driver_version(node)
    gpus = smi.select(model.gpus(node), smi._opt(argv, "-i", "--id"))
    nvl = model.hw(node).get("nvlink", {})
    speed = float(nvl.get("link_speed_gbps", 0) or 0)
    errors = "-e" in argv or "--errorcounters" in argv
    status = "-s" in argv or "--status" in argv
    if not (errors or status):
        sys.stdout.write(
            "Invalid combination of input arguments. Please run 'nvidia-smi nvlink -h' for help.\n"
        )
        return smi.RC_INVALID_ARG
    out: list[str] = []
    rc = 0
    growing = crc_growth(node) if errors else {}
    for gpu in gpus:
        if gpu.lost:
            out.append(smi.smi_q.lost_message(gpu))
            rc = smi.RC_GPU_LOST
            continue
        out.append(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
        if not gpu.links:
            continue  # no NVLink on this board: the header alone, like PCIe-only GPUs
        if gpu.mig_current:
            out.append("Nvlink queries are not supported for Devices in MIG mode")
            continue
        if status:
            if not any(gpu.links):
                out.append("NVML: Unable to retrieve NVLink information as all links are inactive")
                continue
            for i, up in enumerate(gpu.links):
                out.append(f"\t Link {i}: {_speed(speed) if up else '<inactive>'}")
        else:
            blocks = []
            for i, up in enumerate(gpu.links):
                # a link that went down leaves replay/recovery/CRC counts behind
                replay, recovery, crc = (0, 0, 0) if up else (12, 3, 57)
                crc += growing.get((gpu.slot, i), 0)
                blocks.append(
                    f"\t Link {i}: Replay Errors: {replay}\n"
                    f"\t Link {i}: Recovery Errors: {recovery}\n"
                    f"\t Link {i}: CRC Errors: {crc}"
                )
            out.append("\n\n".join(blocks))
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return rc
