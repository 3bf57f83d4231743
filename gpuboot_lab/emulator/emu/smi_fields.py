"""nvidia-smi --query-gpu fields: name -> (unit, value). Units follow the real CSV headers
("memory.total [MiB]"); "[N/A]" is how the CSV shows an unsupported value."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .model import Gpu

NA = "[N/A]"


@dataclass
class Ctx:
    driver: str
    count: int
    fabric: tuple[str, str]  # (state, status)
    mig_supported: bool
    has_nvswitch: bool
    # GPU slot -> compute processes on it: (pid, name, used MiB)
    processes: dict[int, list[tuple[str, str, int]]] = field(default_factory=dict)


Getter = Callable[[Gpu, Ctx], object]


def _active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def _onoff(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def _reasons(g: Gpu) -> int:
    # NVML clocks event reason bits: idle 0x1, hw slowdown 0x8, sw thermal 0x20, hw thermal 0x40
    return 0x68 if g.thermal else 0x1


def _mig(g: Gpu, c: Ctx, pending: bool) -> str:
    if not c.mig_supported:
        return NA
    return _onoff(g.mig_pending if pending else g.mig_current)


def _mem_used(g: Gpu) -> int:
    return 0


def _reserved(g: Gpu) -> int:
    return int(g.hw.get("memory_reserved_mib", 551))


def _ecc_total(g: Gpu, kind: str) -> object:
    if kind == "uncorrected.volatile":
        return g.dram_uncorr_vol
    if kind == "uncorrected.aggregate":
        return g.dram_uncorr_agg
    return 0


def _remap(g: Gpu, c: Ctx, value: object) -> object:
    return NA if g.mig_current else value


def _clock_cur(g: Gpu, which: str) -> int:
    mx = g.hw.get("clocks_max_mhz", {})
    if which == "memory":
        return int(mx.get("memory", 2619))
    if which == "video":
        return 765
    return 1275 if g.thermal else 345


FIELDS: dict[str, tuple[str | None, Getter]] = {
    "timestamp": (
        None,
        lambda g, c: time.strftime("%Y/%m/%d %H:%M:%S.") + f"{int(time.time() % 1 * 1000):03d}",
    ),
    "driver_version": (None, lambda g, c: c.driver),
    "count": (None, lambda g, c: c.count),
    "name": (None, lambda g, c: g.name),
    "serial": (None, lambda g, c: g.serial),
    "uuid": (None, lambda g, c: g.uuid),
    "pci.bus_id": (None, lambda g, c: g.bus_id),
    "pci.domain": (None, lambda g, c: "0x" + g.bus_id[4:8]),
    "pci.bus": (None, lambda g, c: "0x" + g.bus_id[9:11]),
    "pci.device": (None, lambda g, c: "0x" + g.bus_id[12:14]),
    "pci.baseClass": (None, lambda g, c: "0x3"),
    "pci.subClass": (None, lambda g, c: "0x2"),
    "pci.device_id": (None, lambda g, c: g.hw["pci_device_id"]),
    "pci.sub_device_id": (None, lambda g, c: g.hw.get("pci_sub_system_id", NA)),
    "pcie.link.gen.current": (None, lambda g, c: g.pcie_gen),
    "pcie.link.gen.gpucurrent": (None, lambda g, c: g.pcie_gen),
    "pcie.link.gen.max": (None, lambda g, c: g.pcie_gen_max),
    "pcie.link.gen.gpumax": (None, lambda g, c: g.pcie_gen_max),
    "pcie.link.gen.hostmax": (None, lambda g, c: g.pcie_gen_max),
    "pcie.link.width.current": (None, lambda g, c: g.pcie_width),
    "pcie.link.width.max": (None, lambda g, c: g.pcie_width_max),
    "index": (None, lambda g, c: g.index),
    "display_mode": (None, lambda g, c: "Enabled"),
    "display_active": (None, lambda g, c: "Disabled"),
    "persistence_mode": (None, lambda g, c: _onoff(g.persistence)),
    "addressing_mode": (None, lambda g, c: "None"),
    "accounting.mode": (None, lambda g, c: "Disabled"),
    "accounting.buffer_size": (None, lambda g, c: 4000),
    "driver_model.current": (None, lambda g, c: NA),
    "driver_model.pending": (None, lambda g, c: NA),
    "vbios_version": (None, lambda g, c: g.hw["vbios"]),
    "inforom.img": (None, lambda g, c: g.hw.get("inforom_image", NA)),
    "inforom.oem": (None, lambda g, c: "2.1"),
    "inforom.ecc": (None, lambda g, c: "7.16"),
    "inforom.pwr": (None, lambda g, c: NA),
    "gom.current": (None, lambda g, c: NA),
    "gom.pending": (None, lambda g, c: NA),
    "fan.speed": ("%", lambda g, c: NA),
    "pstate": (None, lambda g, c: "P0"),
    "clocks_event_reasons.supported": (None, lambda g, c: "0x00000000000001FF"),
    "clocks_event_reasons.active": (None, lambda g, c: f"0x{_reasons(g):016X}"),
    "clocks_event_reasons.gpu_idle": (None, lambda g, c: _active(not g.thermal)),
    "clocks_event_reasons.applications_clocks_setting": (None, lambda g, c: _active(False)),
    "clocks_event_reasons.sw_power_cap": (None, lambda g, c: _active(False)),
    "clocks_event_reasons.hw_slowdown": (None, lambda g, c: _active(g.thermal)),
    "clocks_event_reasons.hw_thermal_slowdown": (None, lambda g, c: _active(g.thermal)),
    "clocks_event_reasons.hw_power_brake_slowdown": (None, lambda g, c: _active(False)),
    "clocks_event_reasons.sw_thermal_slowdown": (None, lambda g, c: _active(g.thermal)),
    "clocks_event_reasons.sync_boost": (None, lambda g, c: _active(False)),
    "memory.total": ("MiB", lambda g, c: int(g.hw["memory_mib"])),
    "memory.reserved": ("MiB", lambda g, c: _reserved(g)),
    "memory.used": ("MiB", lambda g, c: _mem_used(g)),
    "memory.free": ("MiB", lambda g, c: int(g.hw["memory_mib"]) - _reserved(g) - _mem_used(g)),
    "compute_mode": (None, lambda g, c: "Default"),
    "compute_cap": (None, lambda g, c: g.hw.get("compute_cap", NA)),
    "utilization.gpu": ("%", lambda g, c: 0),
    "utilization.memory": ("%", lambda g, c: 0),
    "ecc.mode.current": (None, lambda g, c: "Enabled"),
    "ecc.mode.pending": (None, lambda g, c: "Enabled"),
    "retired_pages.single_bit_ecc.count": (None, lambda g, c: NA),
    "retired_pages.double_bit.count": (None, lambda g, c: NA),
    "retired_pages.pending": (None, lambda g, c: NA),
    "remapped_rows.correctable": (None, lambda g, c: _remap(g, c, g.remap_corr)),
    "remapped_rows.uncorrectable": (None, lambda g, c: _remap(g, c, g.remap_uncorr)),
    "remapped_rows.pending": (None, lambda g, c: _remap(g, c, "Yes" if g.remap_pending else "No")),
    "remapped_rows.failure": (None, lambda g, c: _remap(g, c, "Yes" if g.remap_failure else "No")),
    "remapped_rows.histogram.max": (
        None,
        lambda g, c: int(g.hw.get("remap_banks", 2560)) - g.remap_corr - g.remap_uncorr,
    ),
    "remapped_rows.histogram.high": (None, lambda g, c: g.remap_corr + g.remap_uncorr),
    "remapped_rows.histogram.partial": (None, lambda g, c: 0),
    "remapped_rows.histogram.low": (None, lambda g, c: 0),
    "remapped_rows.histogram.none": (None, lambda g, c: 0),
    "temperature.gpu": (None, lambda g, c: g.temp),
    "temperature.gpu.tlimit": (None, lambda g, c: max(0, 87 - g.temp)),
    "temperature.memory": (None, lambda g, c: g.mem_temp),
    "power.management": (None, lambda g, c: "Enabled"),
    "power.draw": ("W", lambda g, c: f"{g.power:.2f}"),
    "power.draw.average": ("W", lambda g, c: f"{g.power:.2f}"),
    "power.draw.instant": ("W", lambda g, c: f"{g.power - 0.2:.2f}"),
    "power.limit": ("W", lambda g, c: f"{float(g.hw['power_limit_w']):.2f}"),
    "enforced.power.limit": ("W", lambda g, c: f"{float(g.hw['power_limit_w']):.2f}"),
    "power.default_limit": ("W", lambda g, c: f"{float(g.hw['power_limit_w']):.2f}"),
    "power.min_limit": ("W", lambda g, c: f"{float(g.hw.get('power_min_w', 100)):.2f}"),
    "power.max_limit": ("W", lambda g, c: f"{float(g.hw['power_limit_w']):.2f}"),
    "clocks.current.graphics": ("MHz", lambda g, c: _clock_cur(g, "graphics")),
    "clocks.current.sm": ("MHz", lambda g, c: _clock_cur(g, "sm")),
    "clocks.current.memory": ("MHz", lambda g, c: _clock_cur(g, "memory")),
    "clocks.current.video": ("MHz", lambda g, c: _clock_cur(g, "video")),
    "clocks.max.graphics": ("MHz", lambda g, c: g.hw["clocks_max_mhz"]["graphics"]),
    "clocks.max.sm": ("MHz", lambda g, c: g.hw["clocks_max_mhz"]["sm"]),
    "clocks.max.memory": ("MHz", lambda g, c: g.hw["clocks_max_mhz"]["memory"]),
    "mig.mode.current": (None, lambda g, c: _mig(g, c, False)),
    "mig.mode.pending": (None, lambda g, c: _mig(g, c, True)),
    "fabric.state": (None, lambda g, c: c.fabric[0]),
    "fabric.status": (None, lambda g, c: c.fabric[1]),
    "platform.module_id": (None, lambda g, c: g.module_id if c.has_nvswitch else NA),
    "gsp.mode.current": (None, lambda g, c: "Enabled"),
    "gsp.mode.default": (None, lambda g, c: "Enabled"),
}

# ECC counters: everything not modelled in detail is 0 (or N/A for the pre-Ampere caches).
for _kind in ("corrected", "uncorrected"):
    for _when in ("volatile", "aggregate"):
        _base = f"ecc.errors.{_kind}.{_when}"
        for _part in ("device_memory", "dram"):
            FIELDS[f"{_base}.{_part}"] = (None, lambda g, c, k=f"{_kind}.{_when}": _ecc_total(g, k))
        for _part in ("register_file", "l1_cache", "l2_cache", "texture_memory", "cbu"):
            FIELDS[f"{_base}.{_part}"] = (None, lambda g, c: NA)
        FIELDS[f"{_base}.sram"] = (None, lambda g, c: 0)
        FIELDS[f"{_base}.total"] = (None, lambda g, c, k=f"{_kind}.{_when}": _ecc_total(g, k))

# Aliases the real tool accepts.
ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "persistence-mode": "persistence_mode",
    "pstate": "pstate",
    "fan.speed": "fan.speed",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.video": "clocks.current.video",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    "ecc.mode": "ecc.mode.current",
    "temperature.gpu_tlimit": "temperature.gpu.tlimit",
}
for _name in list(FIELDS):
    if _name.startswith("clocks_event_reasons."):
        ALIASES["clocks_throttle_reasons." + _name.split(".", 1)[1]] = _name


def resolve(name: str) -> str | None:
    name = name.strip()
    if name in FIELDS:
        return name
    return ALIASES.get(name)


def header(name: str) -> str:
    canon = resolve(name) or name
    unit = FIELDS[canon][0]
    return f"{name.strip()} [{unit}]" if unit else name.strip()


def value(name: str, gpu: Gpu, ctx: Ctx, units: bool = True) -> str:
    canon = resolve(name) or name
    unit, getter = FIELDS[canon]
    raw = getter(gpu, ctx)
    text = str(raw)
    if unit and units and text != NA:
        text = f"{text} {unit}"
    return text
