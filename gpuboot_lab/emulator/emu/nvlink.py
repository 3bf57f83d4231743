"""nvidia-smi nvlink -s|--status and -e|--errorcounters."""

from __future__ import annotations

import sys

from . import model, smi, state


def _speed(gbps: float) -> str:
    # nvidia-smi prints "25 GB/s" on A100 and "26.562 GB/s" on H100: %g keeps both
    return f"{gbps:g} GB/s"


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
                blocks.append(
                    f"\t Link {i}: Replay Errors: {replay}\n"
                    f"\t Link {i}: Recovery Errors: {recovery}\n"
                    f"\t Link {i}: CRC Errors: {crc}"
                )
            out.append("\n\n".join(blocks))
    if out:
        sys.stdout.write("\n".join(out) + "\n")
    return rc
