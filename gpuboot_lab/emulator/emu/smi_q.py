"""nvidia-smi -q: one tree per GPU, rendered as the text report (535-series layout) or as
XML (nvsmi_device_v12.dtd). Each entry carries its text label and its XML tag."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

from . import model
from .model import Gpu
from .smi_fields import Ctx

WIDTH = 42  # the 535-series report puts the colon in column 42


@dataclass
class E:
    label: str
    tag: str
    value: str | None = None
    kids: list[E] = field(default_factory=list)
    only: str = ""  # "text" or "xml" when the two formats differ
    xml_value: str | None = None  # when the XML spells the value differently


def hexv(label: str, tag: str, value: str) -> E:
    """PCI numbers: "0x19" in the text report, "19" in the XML."""
    return E(label, tag, value, xml_value=value.removeprefix("0x"))


def v(label: str, tag: str, value: object) -> E:
    return E(label, tag, str(value))


def s(label: str, tag: str, *kids: E) -> E:
    return E(label, tag, None, list(kids))


def x(tag: str, value: object = None, *kids: E) -> E:
    """An element only the XML report has."""
    return E("", tag, None if value is None else str(value), list(kids), only="xml")


def t(entry: E) -> E:
    entry.only = "text"
    return entry


def _onoff(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _act(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def _processes(g: Gpu, c: Ctx) -> list[E]:
    """The Processes section: "None", or per process its (MIG) instance ids, then the PID
    with type, name and memory below it (XML: one process_info each)."""
    procs = c.processes.get(g.slot, [])
    if not procs:
        return [t(v("Processes", "processes", "None")), x("processes", "")]
    text, xml = [], []
    for pid, name, mib in procs:
        about = [v("Type", "type", "C"), v("Name", "process_name", name)]
        about.append(v("Used GPU Memory", "used_memory", f"{mib} MiB"))
        ids = [v("GPU instance ID", "gpu_instance_id", "N/A")]
        ids.append(v("Compute instance ID", "compute_instance_id", "N/A"))
        text += [*ids, E("Process ID", "pid", pid, about)]
        xml.append(x("process_info", None, *ids, v("PID", "pid", pid), *about))
    return [t(s("Processes", "processes", *text)), x("processes", None, *xml)]


def gpu_tree(g: Gpu, c: Ctx, driver: str, mig_instances: list[E] | None = None) -> list[E]:
    hw = g.hw
    branch = int(driver.split(".")[0]) if driver.split(".")[0].isdigit() else 535
    reasons = "Clocks Event Reasons" if branch >= 535 else "Clocks Throttle Reasons"
    reasons_tag = "clocks_event_reasons" if branch >= 535 else "clocks_throttle_reasons"
    rt = "clocks_event_reason_" if branch >= 535 else "clocks_throttle_reason_"
    mig_na = not c.mig_supported
    banks = int(hw.get("remap_banks", 2560))
    used_banks = g.remap_corr + g.remap_uncorr
    plimit = f"{float(hw['power_limit_w']):.2f} W"
    mx = hw.get("clocks_max_mhz", {})
    reserved = int(hw.get("memory_reserved_mib", 551))
    total = int(hw["memory_mib"])
    bar1 = int(hw.get("bar1_mib", 131072))
    graphics = 1275 if g.thermal else 345
    remap_na = g.mig_current
    # text: one "MIG Device" section per device; XML: <mig_device>s inside <mig_devices>
    mig_devices = (
        [x("mig_devices", "None")]
        if not mig_instances
        else [*(t(copy.deepcopy(d)) for d in mig_instances), x("mig_devices", None, *mig_instances)]
    )
    return [
        v("Product Name", "product_name", g.name),
        v("Product Brand", "product_brand", hw.get("brand", "NVIDIA")),
        v("Product Architecture", "product_architecture", hw.get("architecture", "N/A")),
        v("Display Mode", "display_mode", "Enabled"),
        v("Display Active", "display_active", "Disabled"),
        v("Persistence Mode", "persistence_mode", _onoff(g.persistence)),
        v("Addressing Mode", "addressing_mode", "None"),
        s(
            "MIG Mode",
            "mig_mode",
            v("Current", "current_mig", "N/A" if mig_na else _onoff(g.mig_current)),
            v("Pending", "pending_mig", "N/A" if mig_na else _onoff(g.mig_pending)),
        ),
        *mig_devices,
        v("Accounting Mode", "accounting_mode", "Disabled"),
        v("Accounting Mode Buffer Size", "accounting_mode_buffer_size", 4000),
        s(
            "Driver Model",
            "driver_model",
            v("Current", "current_dm", "N/A"),
            v("Pending", "pending_dm", "N/A"),
        ),
        v("Serial Number", "serial", g.serial),
        v("GPU UUID", "uuid", g.uuid),
        v("Minor Number", "minor_number", g.slot),
        v("VBIOS Version", "vbios_version", hw["vbios"]),
        v("MultiGPU Board", "multigpu_board", "No"),
        v("Board ID", "board_id", "0x" + g.bus_id[9:11].lower() + "00"),
        v("Board Part Number", "board_part_number", hw.get("board_part_number", "N/A")),
        v("GPU Part Number", "gpu_part_number", hw.get("gpu_part_number", "N/A")),
        v("FRU Part Number", "gpu_fru_part_number", "N/A"),
        v("Module ID", "gpu_module_id", g.module_id if c.has_nvswitch else 1),
        s(
            "Inforom Version",
            "inforom_version",
            v("Image Version", "img_version", hw.get("inforom_image", "N/A")),
            v("OEM Object", "oem_object", "2.1"),
            v("ECC Object", "ecc_object", "7.16"),
            v("Power Management Object", "pwr_object", "N/A"),
        ),
        s(
            "Inforom BBX Object Flush",
            "inforom_bbx_flush",
            v("Latest Timestamp", "latest_timestamp", "N/A"),
            v("Latest Duration", "latest_duration", "N/A"),
        ),
        s(
            "GPU Operation Mode",
            "gpu_operation_mode",
            v("Current", "current_gom", "N/A"),
            v("Pending", "pending_gom", "N/A"),
        ),
        v("GSP Firmware Version", "gsp_firmware_version", driver),
        s(
            "GPU Virtualization Mode",
            "gpu_virtualization_mode",
            v("Virtualization Mode", "virtualization_mode", "None"),
            v("Host VGPU Mode", "host_vgpu_mode", "N/A"),
        ),
        s(
            "GPU Reset Status",
            "gpu_reset_status",
            v("Reset Required", "reset_required", "Yes" if g.remap_pending else "No"),
            v("Drain and Reset Recommended", "drain_and_reset_recommended", "No"),
        ),
        s("IBMNPU", "ibmnpu", v("Relaxed Ordering Mode", "relaxed_ordering_mode", "N/A")),
        s(
            "PCI",
            "pci",
            hexv("Bus", "pci_bus", "0x" + g.bus_id[9:11]),
            hexv("Device", "pci_device", "0x" + g.bus_id[12:14]),
            hexv("Domain", "pci_domain", "0x" + g.bus_id[4:8]),
            hexv("Device Id", "pci_device_id", hw["pci_device_id"]),
            v("Bus Id", "pci_bus_id", g.bus_id),
            hexv("Sub System Id", "pci_sub_system_id", hw.get("pci_sub_system_id", "N/A")),
            s(
                "GPU Link Info",
                "pci_gpu_link_info",
                s(
                    "PCIe Generation",
                    "pcie_gen",
                    v("Max", "max_link_gen", g.pcie_gen_max),
                    v("Current", "current_link_gen", g.pcie_gen),
                    v("Device Current", "device_current_link_gen", g.pcie_gen),
                    v("Device Max", "max_device_link_gen", g.pcie_gen_max),
                    v("Host Max", "max_host_link_gen", g.pcie_gen_max),
                ),
                s(
                    "Link Width",
                    "link_widths",
                    v("Max", "max_link_width", f"{g.pcie_width_max}x"),
                    v("Current", "current_link_width", f"{g.pcie_width}x"),
                ),
            ),
            s(
                "Bridge Chip",
                "pci_bridge_chip",
                v("Type", "bridge_chip_type", "N/A"),
                v("Firmware", "bridge_chip_fw", "N/A"),
            ),
            v("Replays Since Reset", "replay_counter", 0),
            v("Replay Number Rollovers", "replay_rollover_counter", 0),
            v("Tx Throughput", "tx_util", "0 KB/s"),
            v("Rx Throughput", "rx_util", "0 KB/s"),
            v("Atomic Caps Inbound", "atomic_caps_inbound", "N/A"),
            v(
                "Atomic Caps Outbound",
                "atomic_caps_outbound",
                "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64",
            ),
        ),
        v("Fan Speed", "fan_speed", "N/A"),
        v("Performance State", "performance_state", "P0"),
        s(
            reasons,
            reasons_tag,
            v("Idle", rt + "gpu_idle", _act(not g.thermal)),
            v("Applications Clocks Setting", rt + "applications_clocks_setting", _act(False)),
            v("SW Power Cap", rt + "sw_power_cap", _act(False)),
            E(
                "HW Slowdown",
                rt + "hw_slowdown",
                _act(g.thermal),
                [
                    v("HW Thermal Slowdown", rt + "hw_thermal_slowdown", _act(g.thermal)),
                    v("HW Power Brake Slowdown", rt + "hw_power_brake_slowdown", _act(False)),
                ],
            ),
            v("Sync Boost", rt + "sync_boost", _act(False)),
            v("SW Thermal Slowdown", rt + "sw_thermal_slowdown", _act(g.thermal)),
            v("Display Clock Setting", rt + "display_clocks_setting", _act(False)),
        ),
        v("Sparse Operation Mode", "sparse_operation_mode", "Disabled"),
        s(
            "FB Memory Usage",
            "fb_memory_usage",
            v("Total", "total", f"{total} MiB"),
            v("Reserved", "reserved", f"{reserved} MiB"),
            v("Used", "used", "0 MiB"),
            v("Free", "free", f"{total - reserved} MiB"),
        ),
        s(
            "BAR1 Memory Usage",
            "bar1_memory_usage",
            v("Total", "total", f"{bar1} MiB"),
            v("Used", "used", "1 MiB"),
            v("Free", "free", f"{bar1 - 1} MiB"),
        ),
        s(
            "Conf Compute Protected Memory Usage",
            "cc_protected_memory_usage",
            v("Total", "total", "0 MiB"),
            v("Used", "used", "0 MiB"),
            v("Free", "free", "0 MiB"),
        ),
        v("Compute Mode", "compute_mode", "Default"),
        s(
            "Utilization",
            "utilization",
            v("Gpu", "gpu_util", "0 %"),
            v("Memory", "memory_util", "0 %"),
            v("Encoder", "encoder_util", "0 %"),
            v("Decoder", "decoder_util", "0 %"),
            v("JPEG", "jpeg_util", "0 %"),
            v("OFA", "ofa_util", "0 %"),
        ),
        s(
            "Encoder Stats",
            "encoder_stats",
            v("Active Sessions", "session_count", 0),
            v("Average FPS", "average_fps", 0),
            v("Average Latency", "average_latency", 0),
        ),
        s(
            "FBC Stats",
            "fbc_stats",
            v("Active Sessions", "session_count", 0),
            v("Average FPS", "average_fps", 0),
            v("Average Latency", "average_latency", 0),
        ),
        s(
            "ECC Mode",
            "ecc_mode",
            v("Current", "current_ecc", "Enabled"),
            v("Pending", "pending_ecc", "Enabled"),
        ),
        s(
            "ECC Errors",
            "ecc_errors",
            s(
                "Volatile",
                "volatile",
                v("SRAM Correctable", "sram_correctable", 0),
                v("SRAM Uncorrectable Parity", "sram_uncorrectable_parity", 0),
                v("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded", 0),
                v("DRAM Correctable", "dram_correctable", 0),
                v("DRAM Uncorrectable", "dram_uncorrectable", g.dram_uncorr_vol),
            ),
            s(
                "Aggregate",
                "aggregate",
                v("SRAM Correctable", "sram_correctable", 0),
                v("SRAM Uncorrectable Parity", "sram_uncorrectable_parity", 0),
                v("SRAM Uncorrectable SEC-DED", "sram_uncorrectable_secded", 0),
                v("DRAM Correctable", "dram_correctable", 0),
                v("DRAM Uncorrectable", "dram_uncorrectable", g.dram_uncorr_agg),
                v("SRAM Threshold Exceeded", "sram_threshold_exceeded", "No"),
            ),
            s(
                "Aggregate Uncorrectable SRAM Sources",
                "aggregate_uncorrectable_sram_sources",
                v("SRAM L2", "sram_l2", 0),
                v("SRAM SM", "sram_sm", 0),
                v("SRAM Microcontroller", "sram_microcontroller", 0),
                v("SRAM PCIE", "sram_pcie", 0),
                v("SRAM Other", "sram_other", 0),
            ),
        ),
        t(
            s(
                "Retired Pages",
                "retired_pages",
                v("Single Bit ECC", "multiple_single_bit_retirement", "N/A"),
                v("Double Bit ECC", "double_bit_retirement", "N/A"),
                v("Pending Page Blacklist", "pending_blacklist", "N/A"),
            )
        ),
        x(
            "retired_pages",
            None,
            x(
                "multiple_single_bit_retirement",
                None,
                x("retired_count", "N/A"),
                x("retired_pagelist", "N/A"),
            ),
            x(
                "double_bit_retirement",
                None,
                x("retired_count", "N/A"),
                x("retired_pagelist", "N/A"),
            ),
            x("pending_blacklist", "N/A"),
            x("pending_retirement", "N/A"),
        ),
        s(
            "Remapped Rows",
            "remapped_rows",
            v("Correctable Error", "remapped_row_corr", "N/A" if remap_na else g.remap_corr),
            v("Uncorrectable Error", "remapped_row_unc", "N/A" if remap_na else g.remap_uncorr),
            v(
                "Pending",
                "remapped_row_pending",
                "N/A" if remap_na else ("Yes" if g.remap_pending else "No"),
            ),
            v(
                "Remapping Failure Occurred",
                "remapped_row_failure",
                "N/A" if remap_na else ("Yes" if g.remap_failure else "No"),
            ),
            s(
                "Bank Remap Availability Histogram",
                "row_remapper_histogram",
                v("Max", "row_remapper_histogram_max", f"{banks - used_banks} bank(s)"),
                v("High", "row_remapper_histogram_high", f"{used_banks} bank(s)"),
                v("Partial", "row_remapper_histogram_partial", "0 bank(s)"),
                v("Low", "row_remapper_histogram_low", "0 bank(s)"),
                v("None", "row_remapper_histogram_none", "0 bank(s)"),
            ),
        ),
        s(
            "Temperature",
            "temperature",
            v("GPU Current Temp", "gpu_temp", f"{g.temp} C"),
            v("GPU T.Limit Temp", "gpu_temp_tlimit", f"{max(0, 87 - g.temp)} C"),
            v("GPU Shutdown T.Limit Temp", "gpu_temp_max_tlimit_threshold", "-8 C"),
            v("GPU Slowdown T.Limit Temp", "gpu_temp_slow_tlimit_threshold", "-2 C"),
            v("GPU Max Operating T.Limit Temp", "gpu_temp_max_gpu_tlimit_threshold", "0 C"),
            v("GPU Target Temperature", "gpu_target_temperature", "N/A"),
            v("Memory Current Temp", "memory_temp", f"{g.mem_temp} C"),
            v("Memory Max Operating T.Limit Temp", "gpu_temp_max_mem_tlimit_threshold", "0 C"),
        ),
        x(
            "supported_gpu_target_temp",
            None,
            x("gpu_target_temp_min", "N/A"),
            x("gpu_target_temp_max", "N/A"),
        ),
        s(
            "GPU Power Readings",
            "gpu_power_readings",
            x("power_state", "P0"),
            v("Power Draw", "power_draw", f"{g.power:.2f} W"),
            v("Current Power Limit", "current_power_limit", plimit),
            v("Requested Power Limit", "requested_power_limit", plimit),
            v("Default Power Limit", "default_power_limit", plimit),
            v("Min Power Limit", "min_power_limit", f"{float(hw.get('power_min_w', 100)):.2f} W"),
            v("Max Power Limit", "max_power_limit", plimit),
        ),
        s(
            "Module Power Readings",
            "module_power_readings",
            x("power_state", "P0"),
            v("Power Draw", "power_draw", "N/A"),
            v("Current Power Limit", "current_power_limit", "N/A"),
            v("Requested Power Limit", "requested_power_limit", "N/A"),
            v("Default Power Limit", "default_power_limit", "N/A"),
            v("Min Power Limit", "min_power_limit", "N/A"),
            v("Max Power Limit", "max_power_limit", "N/A"),
        ),
        s(
            "Clocks",
            "clocks",
            v("Graphics", "graphics_clock", f"{graphics} MHz"),
            v("SM", "sm_clock", f"{graphics} MHz"),
            v("Memory", "mem_clock", f"{mx.get('memory', 2619)} MHz"),
            v("Video", "video_clock", "765 MHz"),
        ),
        s(
            "Applications Clocks",
            "applications_clocks",
            v("Graphics", "graphics_clock", f"{mx.get('graphics', 1980)} MHz"),
            v("Memory", "mem_clock", f"{mx.get('memory', 2619)} MHz"),
        ),
        s(
            "Default Applications Clocks",
            "default_applications_clocks",
            v("Graphics", "graphics_clock", f"{mx.get('graphics', 1980)} MHz"),
            v("Memory", "mem_clock", f"{mx.get('memory', 2619)} MHz"),
        ),
        s("Deferred Clocks", "deferred_clocks", v("Memory", "mem_clock", "N/A")),
        s(
            "Max Clocks",
            "max_clocks",
            v("Graphics", "graphics_clock", f"{mx.get('graphics', 1980)} MHz"),
            v("SM", "sm_clock", f"{mx.get('sm', 1980)} MHz"),
            v("Memory", "mem_clock", f"{mx.get('memory', 2619)} MHz"),
            v("Video", "video_clock", f"{mx.get('video', 1545)} MHz"),
        ),
        s(
            "Max Customer Boost Clocks",
            "max_customer_boost_clocks",
            v("Graphics", "graphics_clock", f"{mx.get('graphics', 1980)} MHz"),
        ),
        s(
            "Clock Policy",
            "clock_policy",
            v("Auto Boost", "auto_boost", "N/A"),
            v("Auto Boost Default", "auto_boost_default", "N/A"),
        ),
        s("Voltage", "voltage", v("Graphics", "graphics_volt", "670.000 mV")),
        s("Fabric", "fabric", v("State", "state", c.fabric[0]), v("Status", "status", c.fabric[1])),
        *_processes(g, c),
        x("accounted_processes", ""),
    ]


# -q -d SECTION: the top-level sections each display type keeps (nvidia-smi -h "-d")
DISPLAY = {
    "MEMORY": {"FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"},
    "UTILIZATION": {"Utilization"},
    "ECC": {"ECC Mode", "ECC Errors"},
    "TEMPERATURE": {"Temperature"},
    "POWER": {"GPU Power Readings", "Module Power Readings"},
    "CLOCK": {
        "Clocks",
        "Applications Clocks",
        "Default Applications Clocks",
        "Deferred Clocks",
        "Max Clocks",
        "Max Customer Boost Clocks",
        "Clock Policy",
    },
    "COMPUTE": {"Compute Mode"},
    "PIDS": {"Processes"},
    "PERFORMANCE": {"Performance State", "Clocks Event Reasons", "Clocks Throttle Reasons"},
    "PAGE_RETIREMENT": {"Retired Pages"},
    "ROW_REMAPPER": {"Remapped Rows"},
    "VOLTAGE": {"Voltage"},
    "FABRIC": {"Fabric"},
}


def select_display(entries: list[E], display: str | None) -> list[E]:
    if not display:
        return entries
    keep: set[str] = set()
    for name in display.upper().split(","):
        keep |= DISPLAY.get(name.strip(), set())
    return [e for e in entries if e.label in keep]


def render_text(entries: list[E], depth: int) -> list[str]:
    out: list[str] = []
    for e in entries:
        if e.only == "xml":
            continue
        label = "    " * depth + e.label
        if e.value is not None:
            out.append(f"{label:<{WIDTH}}: {e.value}")
        else:
            out.append(label)
        out.extend(render_text(e.kids, depth + 1))
    return out


def text_report(
    gpus: list[Gpu],
    ctx: Ctx,
    driver: str,
    mig: dict[str, list[E]] | None = None,
    display: str | None = None,
) -> tuple[str, int]:
    """The whole -q report and nvidia-smi's exit code (15 when a GPU is lost)."""
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        f"{'Timestamp':<{WIDTH}}: {time.ctime()}",
        f"{'Driver Version':<{WIDTH}}: {driver}",
        f"{'CUDA Version':<{WIDTH}}: {model.cuda_version(driver)}",
        "",
        f"{'Attached GPUs':<{WIDTH}}: {ctx.count}",
    ]
    rc = 0
    for i, g in enumerate(gpus):
        if g.lost:
            lines.append(lost_message(g))
            rc = 15
            continue
        lines.append(f"GPU {g.bus_id}")
        tree = gpu_tree(g, ctx, driver, (mig or {}).get(g.bus_id))
        lines.extend(render_text(select_display(tree, display), 1))
        if i != len(gpus) - 1:
            lines.append("")
    return "\n".join(lines) + "\n", rc


def lost_message(g: Gpu) -> str:
    return f"Unable to determine the device handle for GPU{g.bus4}: Unknown Error"
