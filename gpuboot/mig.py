"""MIG layouts: the inventory's ``gpuboot_mig``, checked against the SKU before any host is
touched, and the per-GPU list the ``nvidia_mig`` role applies (``nvidia_mig_layout``).

Inventory form (host or group vars)::

    gpuboot_mig:
      instances: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]   # per GPU; [] = MIG off
      gpus: all                                       # or [0, 1, ...]; the others: MIG off

Each instance is a GPU instance of that profile with its default compute instance.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuboot.errors import ConfigError

KEYS = ("instances", "gpus")
EXAMPLE = "gpuboot_mig: {instances: [3g.40gb, 3g.40gb], gpus: all}"


def _fits(sizes_placements: list[tuple[int, list[int]]], used: list[tuple[int, int]]) -> bool:
    """Can every (size, placements) instance get a placement that overlaps no other?"""
    if not sizes_placements:
        return True
    (size, starts), rest = sizes_placements[0], sizes_placements[1:]
    for start in starts:
        free = all(start + size <= s or s + z <= start for s, z in used)
        if free and _fits(rest, [*used, (start, size)]):
            return True
    return False


def creation_order(names: list[str], by_name: dict[str, dict[str, Any]]) -> list[str]:
    """Largest first, the most constrained of a size first: created in this order, each
    instance still finds a placement whenever the layout fits at all."""
    key = lambda n: (-int(by_name[n]["size"]), len(by_name[n]["placements"]), n)  # noqa: E731
    return sorted(names, key=key)


def layout_vars(value: Any, profile: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"nvidia_mig_layout": [[profile names] per GPU]}`` or ConfigError naming every
    problem of the layout on this SKU."""
    sku = profile.get("name", "this SKU")
    mig = profile["hardware"].get("mig") or {}
    gpu_count = int(profile["hardware"]["gpu"]["count"])
    by_name = {str(p["name"]): p for p in mig.get("profiles") or []}
    if not isinstance(value, dict):
        raise ConfigError("gpuboot_mig must be a mapping", where=where, hint=EXAMPLE)
    problems = [f"unknown key {k!r} (keys: {', '.join(KEYS)})" for k in value if k not in KEYS]
    names = value.get("instances")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            "gpuboot_mig.instances must be a list of GPU instance profile names",
            where=f"{where}.instances",
            hint=EXAMPLE + " ([] turns MIG off)",
        )
    if names and not mig.get("supported"):
        problems.append(f"{sku} does not support MIG: instances must be []")
    else:
        unknown = sorted({n for n in names if n not in by_name})
        if unknown:
            problems.append(
                f"unknown MIG profile(s) {', '.join(unknown)} on {sku} "
                f"(known: {', '.join(by_name)})"
            )
        else:
            too_many = [
                f"{n} x{c} (at most {by_name[n]['instances']})"
                for n, c in Counter(names).items()
                if c > int(by_name[n]["instances"])
            ]
            if too_many:
                problems.append(f"more instances than a GPU has: {', '.join(too_many)}")
            elif not _fits(
                [
                    (int(by_name[n]["size"]), list(by_name[n]["placements"]))
                    for n in creation_order(names, by_name)
                ],
                [],
            ):
                problems.append(
                    f"{', '.join(names)} do not fit on one GPU: their placements overlap "
                    "(see `nvidia-smi mig -lgip` / hardware.mig.profiles for sizes and placements)"
                )
    gpus = value.get("gpus", "all")
    if gpus == "all":
        selected = list(range(gpu_count))
    elif (
        isinstance(gpus, list)
        and all(isinstance(g, int) and 0 <= g < gpu_count for g in gpus)
        and len(set(gpus)) == len(gpus)
    ):
        selected = sorted(gpus)
    else:
        problems.append(f"gpus must be 'all' or distinct GPU indexes 0-{gpu_count - 1}")
        selected = []
    if problems:
        raise ConfigError(
            "; ".join(problems),
            where=where,
            hint=f"fix the layout, e.g. {EXAMPLE}",
        )
    wanted = creation_order([str(n) for n in names], by_name)  # plain str: AnsibleUnicode in
    return {"nvidia_mig_layout": [wanted if i in selected else [] for i in range(gpu_count)]}
