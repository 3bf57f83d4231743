"""NVIDIA Xid catalogue: meaning, category, severity and recommended action per code.

Source: NVIDIA "Xid Errors" documentation (docs.nvidia.com/deploy/xid-errors/) and its Xid
catalog page "Analyzing Xid Errors with the Xid Catalog"
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose resolution buckets
(RESTART_APP, RESET_GPU, RESTART_BM, CONTACT_SUPPORT, IGNORE) are used as ``action``.
Wording is ours; the classification follows the documented causes. ``category``:
"hardware", "application" (the workload's own fault), "driver", or "firmware" (GSP /
on-GPU micro-controllers). ``severity``: "info", "warning", "critical".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    category: str
    severity: str
    action: str  # resolution bucket
    advice: str


def _x(code: int, meaning: str, category: str, severity: str, action: str, advice: str) -> XidInfo:
    return XidInfo(code, meaning, category, severity, action, advice)


XID_CATALOG: dict[int, XidInfo] = {
    x.code: x
    for x in (
        _x(
            8,
            "GPU stopped processing (channel idle timeout)",
            "driver",
            "warning",
            "RESTART_APP",
            "Restart the workload; investigate if it recurs.",
        ),
        _x(
            13,
            "Graphics engine exception (e.g. SM warp exception, out-of-range address)",
            "application",
            "warning",
            "RESTART_APP",
            "Usually a fault in the application's kernel; fix or restart it. "
            "Run diagnostics only if it recurs across unrelated workloads.",
        ),
        _x(
            31,
            "GPU memory page fault (MMU fault, illegal address)",
            "application",
            "warning",
            "RESTART_APP",
            "Application accessed an invalid address; restart and debug the workload.",
        ),
        _x(
            32,
            "Invalid or corrupted push buffer stream",
            "driver",
            "warning",
            "RESTART_APP",
            "Driver or PCIe corruption; restart the workload, check PCIe errors if it recurs.",
        ),
        _x(
            43,
            "GPU stopped processing: channel reset after an application fault",
            "application",
            "warning",
            "RESTART_APP",
            "Follows an application fault (often Xid 13/31); the GPU stays usable.",
        ),
        _x(
            45,
            "Preemptive cleanup due to previous errors (process killed/ended)",
            "application",
            "info",
            "IGNORE",
            "Follow-on event of a killed process or an earlier Xid; judge the earlier event.",
        ),
        _x(
            46,
            "GPU stopped processing",
            "driver",
            "critical",
            "RESET_GPU",
            "Reset the GPU; contact support if it recurs.",
        ),
        _x(
            48,
            "Double bit ECC error (uncorrectable DRAM error)",
            "hardware",
            "critical",
            "RESET_GPU",
            "Drain and reset the GPU so the row remap/page retirement takes effect; "
            "replace the GPU if DBEs recur or remapping fails.",
        ),
        _x(
            61,
            "Internal micro-controller breakpoint/warning (PMU)",
            "firmware",
            "critical",
            "RESET_GPU",
            "Reset the GPU; update the driver/firmware if it recurs.",
        ),
        _x(
            62,
            "Internal micro-controller halt",
            "firmware",
            "critical",
            "RESET_GPU",
            "Reset the GPU; contact support if it recurs.",
        ),
        _x(
            63,
            "ECC page retirement or row remapping recording event",
            "hardware",
            "warning",
            "RESET_GPU",
            "A row was marked for remapping: drain and reset the GPU to activate it.",
        ),
        _x(
            64,
            "ECC page retirement or row remapper recording failure",
            "hardware",
            "critical",
            "RESET_GPU",
            "Remapping could not be recorded: reset the GPU; replace it if it recurs.",
        ),
        _x(
            68,
            "Video processor (NVDEC) exception",
            "hardware",
            "warning",
            "RESTART_APP",
            "Restart the workload; reset the GPU and run diagnostics if it recurs.",
        ),
        _x(
            69,
            "Graphics engine class error",
            "driver",
            "warning",
            "RESTART_APP",
            "Restart the workload; reset the GPU if it recurs.",
        ),
        _x(
            74,
            "NVLink error",
            "hardware",
            "critical",
            "RESET_GPU",
            "Reset the GPU(s); check NVLink/NVSwitch health and fabric manager; "
            "contact support if the link keeps failing.",
        ),
        _x(
            79,
            "GPU has fallen off the bus (PCIe link lost)",
            "hardware",
            "critical",
            "RESTART_BM",
            "Drain the node and power-cycle it; inspect PCIe seating, risers, power and thermals.",
        ),
        _x(
            92,
            "High single-bit ECC error rate",
            "hardware",
            "warning",
            "IGNORE",
            "Corrected errors only; monitor and run diagnostics at the next maintenance window.",
        ),
        _x(
            94,
            "Contained ECC error (only the affected application was stopped)",
            "hardware",
            "warning",
            "RESTART_APP",
            "Restart the workload; reset the GPU at the next opportunity so the remap applies.",
        ),
        _x(
            95,
            "Uncontained ECC error (all applications on the GPU affected)",
            "hardware",
            "critical",
            "RESET_GPU",
            "Drain and reset the GPU; replace it if it recurs.",
        ),
        _x(
            119,
            "GSP RPC timeout (GPU System Processor did not answer)",
            "firmware",
            "critical",
            "RESET_GPU",
            "Reset the GPU or reboot the node; update the driver if it recurs.",
        ),
        _x(
            120,
            "GSP error",
            "firmware",
            "critical",
            "RESET_GPU",
            "Reset the GPU or reboot the node; contact support if it recurs.",
        ),
        _x(
            121,
            "C2C link corrected error",
            "hardware",
            "warning",
            "IGNORE",
            "Corrected chip-to-chip link errors; monitor and reset at the next maintenance window.",
        ),
        _x(
            140,
            "Unrecovered ECC error",
            "hardware",
            "critical",
            "RESET_GPU",
            "Drain and reset the GPU; replace it if it recurs.",
        ),
    )
}


def xid_info(code: int) -> XidInfo:
    """Catalogue entry for ``code``; unknown codes are returned as category "unknown"."""
    return XID_CATALOG.get(code) or XidInfo(
        code,
        "not in gpuboot's catalogue",
        "unknown",
        "warning",
        "CONTACT_SUPPORT",
        "Look the code up in NVIDIA's Xid catalog for this driver.",
    )
