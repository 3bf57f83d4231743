"""NVIDIA Xid catalogue: meaning, category, severity and resolution bucket of every Xid code.

Source (``CATALOG_VERSION``): NVIDIA "Analyzing Xid Errors with the Xid Catalog",
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, and its spreadsheet
Xid-Catalog.xlsx (sheets "Xids", "XID 144-150 Decode", "Guidance Classes"), as published for
the R580 driver branch: codes 1-172, page snapshot of 2025-10-29 (cross-checked against the copy
leptonai/gpud generated from it, catalog_generated.go @ b9842de2). Older GPUs (Volta and
before) use NVIDIA's archived Xid list, which this catalogue does not replace.

Per code: ``mnemonic`` as NVIDIA spells it; ``action`` is NVIDIA's "Resolution Bucket
(Immediate Action)" and ``investigate`` its "Investigatory Action", verbatim. Codes 162-172 have
no published bucket in this version: their ``action`` is gpuboot's reading of the catalogue's
trigger-condition text (``bucket_source == "gpuboot"``). ``meaning`` and ``advice`` are gpuboot's
own words. ``category`` says whose fault it usually is ("hardware", "application" - the
workload's own, "driver", "firmware" - GSP and the on-GPU micro-controllers); ``subsystem`` which
part ("memory", "nvlink", "pcie", "engine", ...). ``severity`` is gpuboot's certification weight:
"critical" (reset, reboot or RMA before the node serves), "warning" (a fault to clear before
certifying), "info" (NVIDIA asks no recovery: worth a look, never a failure). Codes NVIDIA lists
as "Unused" (deprecated, or V100 and older) are kept, so a node that logs one is still judged.
"""

from __future__ import annotations

from dataclasses import dataclass

CATALOG_VERSION = "NVIDIA Xid Catalog R580 (codes 1-172, 2025-10-29)"
CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    category: str
    severity: str
    action: str  # NVIDIA's resolution bucket (immediate action)
    advice: str
    mnemonic: str = ""
    investigate: str = ""  # NVIDIA's investigatory bucket
    subsystem: str = ""
    bucket_source: str = "nvidia"  # "gpuboot": NVIDIA publishes no bucket for the code


# What each immediate bucket asks of an operator (our words for NVIDIA's "Guidance Classes").
BUCKET_ADVICE = {
    "RESTART_APP": "Restart the workload; no reset needed. If it recurs on this GPU with "
    "different workloads, drain it and run `dcgmi diag -r 3`.",
    "RESET_GPU": "Drain the GPU and reset it (`nvidia-smi -r`); reboot if the reset fails; "
    "contact support if it recurs.",
    "RESTART_BM": "Drain the node and reboot (power-cycle) it.",
    "RESTART_VM": "Restart the VM that owns the GPU.",
    "IGNORE": "No recovery needed; watch for repeats.",
    "CONTACT_SUPPORT": "Open a case with the hardware vendor / NVIDIA (attach nvidia-bug-report).",
    "CHECK_MECHANICALS": "Check the GPU's seating and every power connector to it.",
    "UPDATE_SWFW": "Update the driver and firmware to the supported versions.",
    "CHECK_UVM": "If UVM or vGPU is in use, reset the GPU; otherwise no action.",
    "WORKFLOW_XID_45": "Follow the Xid that caused it; a solo Xid 45 (no other Xid): restart "
    "the fabric manager.",
    "WORKFLOW_XID_48": "Drain and reset the GPU (drain-and-reset when Xid 63/64 came with it); "
    "run field diagnostics; for SRAM errors check the SRAM threshold flag and RMA if it is set.",
    "WORKFLOW_NVLINK_ERR": "Reset the GPU(s) or reboot to clear the link; check `nvidia-smi "
    "nvlink -e`, reseat if the link keeps failing, then contact the vendor.",
    "WORKFLOW_NVLINK5_ERR": "Decode the subcode and status words per NVIDIA's Xid 144-150 "
    "table: fatal ones need a GPU reset (drain first), non-fatal ones none; inspect links and "
    "cables if they recur.",
    "XID_154": "Do what the Xid 154 line asks (none, drain, drain and reset, GPU reset, or node "
    "reboot).",
}

# Xid 154 "GPU recovery action changed from 0x.. (A) to 0x.. (B)": B as a resolution bucket.
RECOVERY_BUCKET = {
    "None": "IGNORE",
    "GPU Reset Required": "RESET_GPU",
    "Node Reboot Required": "RESTART_BM",
    "Drain P2P": "DRAIN_P2P",
    "Drain and Reset": "DRAIN_AND_RESET",
}

# Codes whose message prints a "Fatal"/"Nonfatal" word after the NVLink sub-unit.
NVLINK5_CODES = frozenset(range(144, 151))

H, A, D, F = "hardware", "application", "driver", "firmware"
CRIT, WARN, INFO = "critical", "warning", "info"
_CE = "copy engine (CE{n}) exception"
_VID = "{unit} (video/JPEG/optical-flow engine) error"

# code: (mnemonic, immediate, investigatory, category, subsystem, severity, meaning[, advice])
_ROWS: dict[int, tuple[str, ...]] = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP", "CONTACT_SUPPORT", D, "engine",
        WARN, "GPU stopped processing (channel idle timeout)"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP", "CHECK_APP/CUDA", D, "engine", WARN,
         "invalid or corrupted push buffer stream"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "RESTART_APP",
         "WORKFLOW_XID_13", A, "engine", WARN,
         "graphics engine exception (SM warp exception, out-of-range address)",
         "Usually the workload's own bug (cuda-gdb / compute-sanitizer); repeats on the same "
         "GPC/TPC across workloads point at hardware: run `dcgmi diag -r 3`."),
    14: ("ROBUST_CHANNEL_FAKE_ERROR", "IGNORE", "CONTACT_SUPPORT", A, "system", INFO,
         "fake or injected error from user space"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP", "CHECK_APP/CUDA", D, "engine", WARN,
         "invalid or illegal push buffer stream"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "WORKFLOW_XID_31", A, "memory",
         WARN, "GPU memory page fault (MMU fault, illegal address)",
         "The workload touched an invalid address; debug it. Repeated faults on the same GPU "
         "across workloads: run `dcgmi diag -r 3`."),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP", "CHECK_APP/CUDA", D, "pcie", WARN,
         "invalid or corrupted push buffer stream (DMA controller fault, often PCIe quality)",
         "Restart the workload; if it recurs check the GPU's PCIe link (AER errors, width/gen)."),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE", "CHECK_APP/CUDA", F,
         "engine", INFO, "context-switch firmware met an unimplemented method"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE", "CONTACT_SUPPORT", F, "engine",
         INFO, "context-switch firmware watchdog timeout"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=0)),
    40: ("ROBUST_CHANNEL_CE1_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=1)),
    41: ("ROBUST_CHANNEL_CE2_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=2)),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "CONTACT_SUPPORT", A, "engine", INFO,
         "channel reset after a fault in the workload (the GPU stays healthy)"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE", "CONTACT_SUPPORT", D, "engine", INFO,
         "graphics engine fault during a context switch"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45",
         "Solo: RESTART_FM / Not Solo: IGNORE (follow other Xid)", A, "engine", INFO,
         "preemptive channel cleanup (process killed, or fallout of an earlier Xid)",
         "Judge the Xid that caused it (the line names it as `caused by previous Xid N`); a "
         "solo Xid 45 is a killed process."),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", D, "engine", CRIT,
         "GPU stopped processing (GPU timeout)"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "WORKFLOW_XID_48", H, "memory", CRIT,
         "uncorrectable (double-bit) ECC error"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS", "CONTACT_SUPPORT", H,
         "power", CRIT, "auxiliary power is not connected to the GPU board"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP", "INVESTIGATE_SW", D, "security", WARN,
         "SEC2 (security engine) exception"),
    62: ("PMU_HALT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", F, "microcontroller", CRIT,
         "internal micro-controller (PMU) halted"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "IGNORE", H, "memory", WARN,
         "row remapping / page retirement recorded for an ECC error",
         "Running work is unaffected (NVIDIA bucket IGNORE), but the remapped row only takes "
         "effect at the next GPU reset: drain and reset before certifying."),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "CONTACT_SUPPORT", H, "memory", CRIT,
         "row remapping / page retirement failed",
         "Reset the GPU; a remapping failure is an RMA criterion: open a case with the vendor."),
    66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE", "INVESTIGATE_SW", D, "engine",
         INFO, "illegal register access by the driver"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE", "CONTACT_SUPPORT", D, "engine",
         INFO, "illegal access by the driver (verification violation)"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC0")),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", "CHECK_APP/CUDA", D, "engine", WARN,
         "graphics engine class error"),
    70: ("ROBUST_CHANNEL_CE3_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=3)),
    71: ("ROBUST_CHANNEL_CE4_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=4)),
    72: ("ROBUST_CHANNEL_CE5_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=5)),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT", H, "nvlink", CRIT,
         "NVLink error (this GPU's link or the device at its far end)"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=6)),
    76: ("ROBUST_CHANNEL_CE7_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=7)),
    77: ("ROBUST_CHANNEL_CE8_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=8)),
    78: ("VGPU_START_ERROR", "UPDATE_SWFW", "UPDATE_SWFW", D, "vgpu", WARN,
         "vGPU failed to start (guest/host driver mismatch or unsupported vGPU type)"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "CONTACT_SUPPORT", H, "pcie",
         CRIT, "GPU has fallen off the bus (PCIe link lost)",
         "Drain the node and power-cycle it; inspect PCIe seating, risers, power and thermals; "
         "RMA if it falls off again."),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP", "CHECK_APP/CUDA", H, "pcie", WARN,
         "corrupted data sent to the GPU (push buffer CRC mismatch)"),
    82: ("ROBUST_CHANNEL_NVJPG0_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVJPG0")),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC1")),
    84: ("ROBUST_CHANNEL_NVDEC2_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC2")),
    85: ("ROBUST_CHANNEL_CE9_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine", WARN,
         _CE.format(n=9)),
    86: ("ROBUST_CHANNEL_OFA0_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="OFA0")),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC3")),
    89: ("ROBUST_CHANNEL_NVDEC4_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC4")),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "CONTACT_SUPPORT", H, "memory", INFO,
         "high rate of corrected single-bit ECC errors",
         "Corrected errors only (NVIDIA bucket IGNORE); watch the ECC counters and run "
         "diagnostics if the rate stays high."),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE", "CONTACT_SUPPORT", F, "inforom", INFO,
         "InfoROM write refused: provisioned wear limit reached",
         "Usually deliberate (nvflash wear protection); clear it with `nvflash "
         "--elsessionclear` if unintended."),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "IGNORE (sympathetic)", H, "memory",
         WARN, "contained memory error (only the affected application was stopped)",
         "Restart the workload; reset the GPU at the next opportunity so the repair applies."),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "IGNORE (sympathetic)", H, "memory",
         CRIT, "uncontained memory error (every application on the GPU affected)"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC5")),
    97: ("ROBUST_CHANNEL_NVDEC6_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC6")),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
         _VID.format(unit="NVDEC7")),
    **{
        c: (f"ROBUST_CHANNEL_NVJPG{c - 98}_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video",
            WARN, _VID.format(unit=f"NVJPG{c - 98}"))
        for c in range(99, 106)
    },
    106: ("SMBPBI_TEST_MESSAGE", "IGNORE", "IGNORE", F, "system", INFO,
          "SMBPBI test message (out-of-band management test)"),
    107: ("SMBPBI_TEST_MESSAGE_SILENT", "IGNORE", "IGNORE", F, "system", INFO,
          "silent SMBPBI test message (out-of-band management test)"),
    108: ("NVLINK_REMOTE_TRANSLATION_ERROR", "IGNORE", "XID_137_FLOW", A, "nvlink", INFO,
          "NVLink remote translation error (listed unused; treated as Xid 137)"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", D, "engine", CRIT,
          "context-switch timeout"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU", "INVESTIGATE_SW", H, "security", CRIT,
          "security fault (rare unless hardware failed)",
          "Revert recent hardware changes and cold-reset the node; contact the vendor if it "
          "stays."),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU", "INVESTIGATE_SW", F, "gsp", CRIT,
          "GSP (GPU System Processor) did not answer an RPC in time",
          "Reset the GPU or power-cycle the node; if it returns after a power cycle follow "
          "NVIDIA's GPU debug guidelines (driver update, bug report)."),
    120: ("GSP_ERROR", "RESET_GPU", "INVESTIGATE_SW", F, "gsp", CRIT,
          "error in code running on the GSP core"),
    121: ("C2C_ERROR", "IGNORE", "CONTACT_SUPPORT", H, "c2c", INFO,
          "corrected errors on the chip-to-chip link to the Grace CPU",
          "Corrected, no operational impact; reset the GPU at a service window to retrain the "
          "link."),
    **{
        c: (f"ROBUST_CHANNEL_CE{c - 116}_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "engine",
            WARN, _CE.format(n=c - 116))
        for c in range(126, 136)
    },
    136: ("ALI_TRAINING_FAIL", "RESET_GPU", "INVESTIGATE_LINK_SI", H, "nvlink", CRIT,
          "NVLink link training failed"),
    137: ("NVLINK_PRIV_ERR", "IGNORE", "XID_137_FLOW", A, "nvlink", INFO,
          "NVLink privilege error (illegal peer-to-peer access, usually the workload's bug)"),
    139: ("ROBUST_CHANNEL_OFA1_ERROR", "RESTART_APP", "CONTACT_SUPPORT", H, "video", WARN,
          _VID.format(unit="OFA1")),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", "CONTACT_SUPPORT", H, "memory", CRIT,
          "uncorrectable ECC error the driver could not mark for remapping"),
    141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE", "CONTACT_SUPPORT", D, "engine", INFO,
          "CUDA fast-path error"),
    142: ("ROBUST_CHANNEL_NVENC3_ERROR", "CONTACT_SUPPORT", "", H, "video", WARN,
          _VID.format(unit="NVENC3")),
    143: ("GPU_INIT_ERROR", "RESET_GPU", "CONTACT_SUPPORT", H, "system", CRIT,
          "GPU failed to initialise"),
    144: ("NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", H, "nvlink", CRIT,
          "NVLink5 SAW unit error"),
    145: ("NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", H, "nvlink", CRIT,
          "NVLink5 RLW unit error"),
    146: ("NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", H, "nvlink", CRIT,
          "NVLink5 TLW unit error"),
    147: ("NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", H, "nvlink", CRIT,
          "NVLink5 TREX unit error"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", H, "nvlink",
          CRIT, "NVLink5 NVLPW control error"),
    149: ("NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", H, "nvlink", CRIT,
          "NVLink5 NETIR error (link down, bit-error-rate or fabric event)"),
    150: ("NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", F, "nvlink", CRIT,
          "NVLink5 MSE firmware error (watchdog, degraded)"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "CONTACT_SUPPORT", D, "security",
          WARN, "key rotation error (confidential computing)"),
    152: ("ROBUST_CHANNEL_DLA_SMMU_ERROR", "IGNORE", "CONTACT_SUPPORT", D, "engine", INFO,
          "DLA SMMU error (not on data-center GPUs)"),
    153: ("ROBUST_CHANNEL_DLA_TIMEOUT", "IGNORE", "CONTACT_SUPPORT", D, "engine", INFO,
          "DLA timeout (not on data-center GPUs)"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "XID_154", "N/A Informational only regarding another Xid",
          D, "recovery", INFO, "the driver changed the GPU's required recovery action",
          "Do what the line's new action says; the Xid that caused it carries the detail."),
    155: ("NVLINK_SW_DEFINED_ERROR", "RESET_GPU", "INVESTIGATE_SW_USER", D, "nvlink", WARN,
          "NVLink taken down on purpose (software-defined link down, sleep)"),
    156: ("RESOURCE_RETIREMENT_EVENT", "RESET_GPU", "IGNORE", H, "memory", WARN,
          "a faulty GPU resource was retired (takes effect at reset)"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "IGNORE", "CONTACT_SUPPORT", H, "memory", WARN,
          "resource retirement failed: no spare resources left for repair",
          "The GPU still runs but can no longer repair itself; contact the vendor."),
    158: ("GPU_FATAL_TIMEOUT", "RESET_GPU", "CONTACT_SUPPORT", H, "system", CRIT,
          "GPU fatal timeout"),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM", "SYMPATHETIC_REPORT_SOLO", H, "c2c",
          WARN, "CHI non-data error on the C2C link"),
    160: ("CHANNEL_RETIREMENT_EVENT", "IGNORE", "INVESTIGATE_SW", D, "engine", INFO,
          "a channel was retired"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "IGNORE", "INVESTIGATE_SW", D, "engine", INFO,
          "channel retirement failed"),
    162: ("PSHC_REENGAGED", "IGNORE", "", H, "power", INFO,
          "power-smoothing circuitry re-engaged"),
    163: ("PSHC_DISENGAGED", "IGNORE", "", H, "power", INFO,
          "power-smoothing circuitry disengaged (thermal event or timeout)",
          "No reset needed; resolve the thermal events if power smoothing is wanted, or reload "
          "the driver / reset the GPU after a timeout."),
    164: ("PSHC_LOW_LIFETIME", "IGNORE", "", H, "power", INFO,
          "power-smoothing circuitry near the end of its lifetime",
          "Expect power smoothing to switch off soon; plan GPU replacement if it is needed."),
    165: ("PSHC_ZERO_LIFETIME", "CONTACT_SUPPORT", "", H, "power", INFO,
          "power-smoothing circuitry lifetime exhausted (smoothing disabled)",
          "Power swings will occur: check the facility can absorb them or replace the GPU."),
    166: ("NVLINK_SECURE_CRYPTO_ERR", "CONTACT_SUPPORT", "", D, "security", WARN,
          "confidential-computing NVLink traffic before the link was set up for encryption"),
    167: ("PCIE_FATAL_TIMEOUT", "RESET_GPU", "", H, "pcie", CRIT, "fatal PCIe timeout",
          "Reset the GPU (reboot if it does not answer); inspect the PCIe path as for Xid 79."),
    168: ("REDUCED_GPU_MEMORY_CAPACITY", "RESTART_BM", "", H, "memory", WARN,
          "errors found in the write-protected region: GPU memory capacity reduced",
          "Enable ECC (so rows can be remapped), or reboot to retry with a shifted WPR."),
    169: ("SEC2_HALT_ERROR", "RESET_GPU", "", F, "microcontroller", CRIT,
          "internal micro-controller (SEC2) halted"),
    170: ("NVLINK_SECURE_OTHER", "CONTACT_SUPPORT", "", D, "security", WARN,
          "unexpected interrupt in confidential-computing mode"),
    171: ("UNCORRECTABLE_DRAM_ERROR", "WORKFLOW_XID_48", "", H, "memory", CRIT,
          "uncorrectable error in DRAM (detail of an Xid 48)"),
    172: ("UNCORRECTABLE_SRAM_ERROR", "WORKFLOW_XID_48", "", H, "memory", CRIT,
          "uncorrectable error in on-chip SRAM (detail of an Xid 48)",
          "Drain and reset the GPU; check the SRAM error-threshold flag in `nvidia-smi -q`: if "
          "set, run field diagnostics and RMA."),
}  # fmt: skip

# Listed by NVIDIA as "Unused" (deprecated, or only on V100 and older): immediate bucket
# CONTACT_SUPPORT. Seeing one on a current GPU is unexplained, so it is not waved through.
_UNUSED = {
    1: "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", 2: "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD",
    3: "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", 4: "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY",
    5: "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", 6: "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR",
    7: "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", 9: "ROBUST_CHANNEL_GR_ERROR_INSTANCE",
    10: "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", 12: "ROBUST_CHANNEL_GR_ERROR_SW_METHOD",
    15: "ROBUST_CHANNEL_SCANLINE_TIMEOUT", 16: "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT",
    17: "ROBUST_CHANNEL_PARAMETER_ERROR", 18: "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR",
    19: "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", 20: "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD",
    21: "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", 22: "ROBUST_CHANNEL_VP_ERROR_SW_METHOD",
    23: "ROBUST_CHANNEL_RC_LOGGING_ENABLED", 24: "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT",
    26: "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", 27: "ROBUST_CHANNEL_VP_ERROR",
    28: "ROBUST_CHANNEL_VP2_ERROR", 29: "ROBUST_CHANNEL_BSP_ERROR",
    30: "ROBUST_CHANNEL_BAD_ADDR_ACCESS", 33: "ROBUST_CHANNEL_SEC_ERROR",
    34: "ROBUST_CHANNEL_MSVLD_ERROR", 35: "ROBUST_CHANNEL_MSPDEC_ERROR",
    36: "ROBUST_CHANNEL_MSPPP_ERROR", 42: "ROBUST_CHANNEL_VIC_ERROR",
    47: "ROBUST_CHANNEL_NVENC0_ERROR", 49: "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY",
    50: "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", 51: "SILENT_RUNNING_STRESS_TEST_FAILURE",
    52: "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", 53: "SILENT_RUNNING_TEMP_REDUCED_CLOCKING",
    55: "SILENT_RUNNING_TEMPERATURE_READ_ERROR", 56: "DISPLAY_CHANNEL_EXCEPTION",
    57: "FB_LINK_TRAINING_FAILURE_ERROR", 58: "FB_MEMORY_ERROR", 59: "PMU_ERROR",
    61: "PMU_BREAKPOINT", 65: "ROBUST_CHANNEL_NVENC1_ERROR", 73: "ROBUST_CHANNEL_NVENC2_ERROR",
    81: "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", 87: "NVTELEMETRY_DRIVER_REPORT", 90: "LTC_ERROR",
    91: "RESERVED_XID", 111: "BUNDLE_ERROR_EVENT", 112: "DISP_SUPERVISOR_ERROR",
    113: "DP_LT_FAILURE", 114: "HEAD_RG_UNDERFLOW", 115: "CORE_CHANNEL_REGS",
    116: "WINDOW_CHANNEL_REGS", 117: "CURSOR_CHANNEL_REGS", 118: "HEAD_REGS",
    122: "SPI_PMU_RPC_READ_FAIL", 123: "SPI_PMU_RPC_WRITE_FAIL", 124: "SPI_PMU_RPC_ERASE_FAIL",
    125: "INFOROM_FS_ERROR", 138: "ROBUST_CHANNEL_DLA_ERROR",
}  # fmt: skip
_UNUSED_ADVICE = (
    "NVIDIA lists this code as unused on Ampere and newer GPUs: unexplained on this node. "
    "Run `dcgmi diag -r 3` and open a case with an nvidia-bug-report."
)


def _entry(code: int, row: tuple[str, ...]) -> XidInfo:
    mnemonic, action, investigate, category, subsystem, severity, meaning, *advice = row
    return XidInfo(
        code,
        meaning,
        category,
        severity,
        action,
        advice[0] if advice else BUCKET_ADVICE[action],
        mnemonic,
        investigate,
        subsystem,
        "gpuboot" if code >= 162 else "nvidia",
    )


def _unused(code: int, mnemonic: str) -> XidInfo:
    meaning = f"unused on Ampere and newer ({mnemonic.lower().replace('_', ' ')})"
    return XidInfo(
        code, meaning, D, WARN, "CONTACT_SUPPORT", _UNUSED_ADVICE, mnemonic, "", "legacy"
    )


XID_CATALOG: dict[int, XidInfo] = dict(
    sorted(
        [(c, _entry(c, r)) for c, r in _ROWS.items()]
        + [(c, _unused(c, m)) for c, m in _UNUSED.items()]
    )
)


def xid_info(code: int) -> XidInfo:
    """Catalogue entry for ``code``. A code the catalogue does not list fails safe: a hardware
    fault until shown otherwise, named against the catalogue version gpuboot follows."""
    return XID_CATALOG.get(code) or XidInfo(
        code,
        f"not in the {CATALOG_VERSION}",
        "unknown",
        CRIT,
        "CONTACT_SUPPORT",
        f"Xid {code} is not in the {CATALOG_VERSION} that gpuboot follows: treat it as a "
        "hardware fault. Drain the node, run `dcgmi diag -r 3`, look the code up in this "
        f"driver's catalogue ({CATALOG_URL}) and open a case with an nvidia-bug-report.",
    )
