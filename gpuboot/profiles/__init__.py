"""SKU profiles: the hardware a server model has and the bandwidth a healthy one measures.

Profiles are YAML data beside this file (schema in README.md). The lab turns one into
``/etc/gpuemu/profile.json`` for the emulator; certification compares evidence with it.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from gpuboot.bundle.model import MAX_PROFILE_BYTES
from gpuboot.errors import ConfigError
from gpuboot.filecache import FileCache
from gpuboot.yamlsafe import read_capped_yaml

PROFILE_DIR = Path(__file__).resolve().parent

# key path -> expected type(s); every profile must carry these
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "description": str,
    "hardware": dict,
    "hardware.gpu": dict,
    "hardware.gpu.count": int,
    "hardware.gpu.model": str,
    "hardware.gpu.pci_device_id": str,
    "hardware.gpu.memory_mib": int,
    "hardware.gpu.vbios": str,
    "hardware.gpu.power_limit_w": (int, float),
    "hardware.gpu.pcie": dict,
    "hardware.gpu.pcie.gen_max": int,
    "hardware.gpu.pcie.width_max": int,
    "hardware.nvlink": dict,
    "hardware.nvlink.links_per_gpu": int,
    "hardware.nvlink.link_speed_gbps": (int, float),
    "hardware.nvlink.nvswitch_count": int,
    "hardware.mig": dict,
    "hardware.mig.supported": bool,
    "hardware.nics": list,
    "bandwidth": dict,
    "bandwidth.nvbandwidth": dict,
    "bandwidth.nvbandwidth.h2d_gbps": (int, float),
    "bandwidth.nvbandwidth.d2h_gbps": (int, float),
    "bandwidth.all_reduce_busbw_gbps": (int, float),
    "bandwidth.ib_write_bw_gbps": (int, float),
}
NIC_KEYS: dict[str, type | tuple[type, ...]] = {
    "hca": str,
    "netdev": str,
    "pci_bus_id": str,
    "ca_type": str,
    "firmware": str,
    "rate": int,
    "link_layer": str,
}
MIG_PROFILE_KEYS = ("id", "name", "instances", "memory_gib", "size", "placements")


def list_profiles() -> list[str]:
    """Names of the profiles shipped with gpuboot (file stems)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def _resolve(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    path = Path(text)
    if path.suffix in (".yaml", ".yml", ".json") or "/" in text:
        # a FIFO, a device or a link is there: the reader refuses it by its kind
        if not (path.exists() or path.is_symlink()):
            raise ConfigError(
                f"profile file {text} does not exist",
                where=text,
                hint=f"use a path to a profile file or one of: {', '.join(list_profiles())}",
            )
        return path
    candidate = PROFILE_DIR / f"{text}.yaml"
    if not candidate.is_file():
        raise ConfigError(
            f"unknown SKU profile {text!r}",
            where="profile",
            hint=f"known profiles: {', '.join(list_profiles())}",
        )
    return candidate


TYPE_NAMES = {
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "a mapping",
    list: "a list",
    bool: "true or false",
}


def _type_name(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    if float in types:
        return "a number"
    return " or ".join(TYPE_NAMES.get(t, t.__name__) for t in types)


def _check_type(value: Any, expected: type | tuple[type, ...]) -> bool:
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in types:
        return False  # YAML `yes` must not pass for a count
    return isinstance(value, types)


def validate(data: Any, where: str) -> dict[str, Any]:
    """Check the required keys and their types; return the profile unchanged."""
    if not isinstance(data, dict):
        raise ConfigError(
            "a profile must be a YAML mapping",
            where=where,
            hint="see gpuboot/profiles/README.md for the schema",
        )
    for dotted, expected in REQUIRED.items():
        node: Any = data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(
                    f"missing required key {dotted}",
                    where=f"{where}: {dotted}",
                    hint="see gpuboot/profiles/README.md for the schema",
                )
            node = node[part]
        if not _check_type(node, expected):
            raise ConfigError(
                f"{dotted} must be {_type_name(expected)}, got {node!r}",
                where=f"{where}: {dotted}",
                hint="see gpuboot/profiles/README.md for the schema",
            )
    gpu = data["hardware"]["gpu"]
    if gpu["count"] < 1:
        raise ConfigError(
            "hardware.gpu.count must be at least 1",
            where=f"{where}: hardware.gpu.count",
            hint="count the GPUs of the SKU",
        )
    for key in ("pci_bus_ids", "numa_nodes", "module_ids"):
        if key in gpu and len(gpu[key]) != gpu["count"]:
            raise ConfigError(
                f"hardware.gpu.{key} has {len(gpu[key])} entries for {gpu['count']} GPUs",
                where=f"{where}: hardware.gpu.{key}",
                hint="give one entry per GPU, in PCI order",
            )
    for i, nic in enumerate(data["hardware"]["nics"]):
        for key, expected in NIC_KEYS.items():
            if not isinstance(nic, dict) or key not in nic or not _check_type(nic[key], expected):
                raise ConfigError(
                    f"hardware.nics[{i}].{key} must be {_type_name(expected)}",
                    where=f"{where}: hardware.nics[{i}].{key}",
                    hint="every NIC needs " + ", ".join(NIC_KEYS),
                )
    _validate_topology(data["hardware"], where)
    _validate_trends(data.get("trends"), where)
    mig = data["hardware"]["mig"]
    if mig["supported"]:
        profiles = mig.get("profiles")
        if not isinstance(profiles, list) or not profiles:
            raise ConfigError(
                "hardware.mig.profiles must list the GPU instance profiles when MIG is supported",
                where=f"{where}: hardware.mig.profiles",
                hint="copy them from `nvidia-smi mig -lgip` of the SKU",
            )
        for i, prof in enumerate(profiles):
            missing = [k for k in MIG_PROFILE_KEYS if not isinstance(prof, dict) or k not in prof]
            if missing:
                raise ConfigError(
                    f"hardware.mig.profiles[{i}] lacks {', '.join(missing)}",
                    where=f"{where}: hardware.mig.profiles[{i}]",
                    hint="each MIG profile needs " + ", ".join(MIG_PROFILE_KEYS),
                )
    return data


# `nvidia-smi topo -m` connection kinds, nearest first
TOPO_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _validate_topology(hw: dict[str, Any], where: str) -> None:
    """Optional ``hardware.topology`` (TOP-001): rail_links a list of topo -m kinds,
    nvlink_mesh true or false."""
    topo = hw.get("topology")
    if topo is None:
        return
    key = "hardware.topology"
    if not isinstance(topo, dict):
        raise ConfigError(f"{key} must be a mapping", where=f"{where}: {key}", hint=_SCHEMA)
    rail = topo.get("rail_links", list(TOPO_LINKS[:2]))
    if not isinstance(rail, list) or not rail or not set(rail) <= set(TOPO_LINKS):
        raise ConfigError(
            f"{key}.rail_links must list topo -m kinds, got {rail!r}",
            where=f"{where}: {key}.rail_links",
            hint=f"use some of {', '.join(TOPO_LINKS)} (a rail NIC: PIX or PXB)",
        )
    if not isinstance(topo.get("nvlink_mesh", False), bool):
        raise ConfigError(
            f"{key}.nvlink_mesh must be true or false",
            where=f"{where}: {key}.nvlink_mesh",
            hint=_SCHEMA,
        )


_SCHEMA = "see gpuboot/profiles/README.md for the schema"
_TRENDS_HINT = "see gpuboot/profiles/README.md, 'Trends (scan)'"


def _number(value: Any, low: float, high: float, *, integer: bool = False) -> bool:
    kinds = (int,) if integer else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool) and low <= value <= high


def _source(conf: dict[str, Any], key: str, where: str) -> None:
    """Every threshold says where its number comes from."""
    if not isinstance(conf.get("source"), str) or not conf["source"].strip():
        raise ConfigError(
            f"{key}.source must say where the number comes from",
            where=f"{where}: {key}.source",
            hint='e.g. source: "NVIDIA DCGM ... " or "operator default: <the reasoning>"',
        )


def _validate_trends(trends: Any, where: str) -> None:
    """Optional ``trends`` (gpuboot.trends, scan's early warning): window_hours, min_scans
    and per counter a rate per hour, each with its source; bandwidth_drop a fraction."""
    from gpuboot.trends import COUNTERS, RETENTION_HOURS

    if trends is None:
        return
    key = "trends"
    if not isinstance(trends, dict):
        raise ConfigError(f"{key} must be a mapping", where=f"{where}: {key}", hint=_TRENDS_HINT)
    checks = (
        (
            "window_hours",
            _number(trends.get("window_hours"), 0.01, RETENTION_HOURS),
            f"a number of hours above 0 and at most {RETENTION_HOURS}",
        ),
        (
            "min_scans",
            _number(trends.get("min_scans"), 2, 1000, integer=True),
            "a whole number of scans, at least 2 (a rate needs two readings)",
        ),
    )
    for name, ok, rule in checks:
        if not ok:
            raise ConfigError(
                f"{key}.{name} must be {rule}, got {trends.get(name)!r}",
                where=f"{where}: {key}.{name}",
                hint=_TRENDS_HINT,
            )
    rates = trends.get("rates", {})
    if not isinstance(rates, dict):
        raise ConfigError(
            f"{key}.rates must be a mapping", where=f"{where}: {key}.rates", hint=_TRENDS_HINT
        )
    for counter, conf in rates.items():
        at = f"{key}.rates.{counter}"
        if counter not in COUNTERS:
            raise ConfigError(
                f"{at}: no such counter",
                where=f"{where}: {at}",
                hint=f"counters: {', '.join(COUNTERS)}",
            )
        if not isinstance(conf, dict) or not _number(conf.get("per_hour"), 0, 1e15):
            got = conf.get("per_hour") if isinstance(conf, dict) else conf
            raise ConfigError(
                f"{at}.per_hour must be a number of counts per hour, 0 or more, got {got!r}",
                where=f"{where}: {at}.per_hour",
                hint=f'{at}: {{per_hour: 100, source: "..."}}',
            )
        _source(conf, at, where)
    drop = trends.get("bandwidth_drop")
    if drop is not None:
        at = f"{key}.bandwidth_drop"
        if not isinstance(drop, dict) or not _number(drop.get("fraction"), 0.001, 0.999):
            raise ConfigError(
                f"{at}.fraction must be a fraction between 0 and 1 (0.05: 5% below the "
                "node's own median)",
                where=f"{where}: {at}.fraction",
                hint=_TRENDS_HINT,
            )
        if not _number(drop.get("min_scans"), 2, 1000, integer=True):
            raise ConfigError(
                f"{at}.min_scans must be a whole number of measured scans, at least 2, got "
                f"{drop.get('min_scans')!r}",
                where=f"{where}: {at}.min_scans",
                hint=_TRENDS_HINT,
            )
        _source(drop, at, where)


# validated profiles by absolute path: evaluate reads one profile per node. Absolute: a
# relative path names another file once the working directory moves.
_LOADED: FileCache[dict[str, Any]] = FileCache()


def load_profile(name_or_path: str | Path) -> dict[str, Any]:
    """Load a profile by name (``hgx-h100-sxm-8gpu``) or path, validated. The caller
    gets its own copy; the file is parsed again only when it changed."""
    path = _resolve(name_or_path)
    return copy.deepcopy(_LOADED.get(os.path.abspath(path), path, lambda: _load_profile(path)))


def _load_profile(path: Path) -> dict[str, Any]:
    where = str(path.name if path.parent == PROFILE_DIR else path)
    hint = f"name a profile file (UTF-8 YAML) or one of: {', '.join(list_profiles())}"
    data = read_capped_yaml(path, MAX_PROFILE_BYTES, "profile", hint=hint)
    return validate(data, where)
