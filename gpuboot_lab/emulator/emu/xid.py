"""Xid events: the NVRM lines the driver prints for each code (NVIDIA Xid catalog wording)."""

from __future__ import annotations

from . import kmsg
from .model import Gpu
from .state import Node

# code -> message after "pid=..., name=..., " (hardware-originated events carry no process)
XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
    "0x7f_c8000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000010",
    45: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at physAddr 0x12bac1c3e0 partition 2, subpartition 1.",
    61: "Internal micro-controller breakpoint/warning (PMU halt)",
    62: "Internal micro-controller halt (PMU halt)",
    63: "Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row (0x00000012bac1c3e0) due to insufficient resources.",
    74: "NVLink: fatal error detected on link 0(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate detected.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU{n} GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20800a4c 0x4).",
    120: "GSP task exception: (GPU{n} GSP-RM) (0x0 0x0 0x0 0x0)",
}


def message(code: int, gpu: Gpu, link: int | None = None) -> str:
    text = XID_TEXT.get(code, "Unknown Error")
    text = text.replace("{n}", str(gpu.index))
    if code == 74 and link is not None:
        text = text.replace("link 0(", f"link {link}(")
    return f"NVRM: Xid ({gpu.xid_bus}): {code}, pid='<unknown>', name=<unknown>, {text}"


def emit(node: Node, code: int, gpu: Gpu, link: int | None = None) -> None:
    """Log an Xid the way the driver does: identity preamble once per GPU per boot, then the
    Xid line, then code-specific follow-ups."""
    seen = node.vstate.setdefault("xid_seen", [])
    if gpu.bus_id not in seen:
        seen.append(gpu.bus_id)
        kmsg.log(node, f"NVRM: GPU at {gpu.xid_bus}: {gpu.uuid}", kmsg.INFO)
        kmsg.log(node, f"NVRM: GPU Board Serial Number: {gpu.serial}", kmsg.INFO)
    kmsg.log(node, message(code, gpu, link), kmsg.WARNING)
    if code == 79:
        kmsg.log(node, f"NVRM: GPU {gpu.bus4.lower()}: GPU has fallen off the bus.", kmsg.ERR)
