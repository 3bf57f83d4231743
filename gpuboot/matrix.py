"""`gpuboot matrix` and `gpuboot mirror`: the shipped stacks, their checks, mirror lists."""

from __future__ import annotations

from typing import Any

from gpuboot.errors import ConfigError


def _component_row(name: str, comp: Any, os_family: str) -> dict[str, Any]:
    pins = comp.pins_for(os_family) if comp.enabled else None
    return {
        "component": name,
        "enabled": comp.enabled,
        "version": comp.version,
        "packages": [f"{p.name}={p.version}" for p in pins.packages] if pins else [],
    }


def list_all() -> list[dict[str, Any]]:
    from gpuboot.stacks import check_stack, list_stacks, load_stack

    rows = []
    for name in list_stacks():
        stack = load_stack(name)
        rows.append(
            {
                "stack": name,
                "driver": f"{stack.driver.version} ({stack.driver.flavor})",
                "cuda": stack.cuda.version,
                "doca_ofed": stack.doca_ofed.version if stack.doca_ofed.enabled else None,
                "profiles": list(stack.profiles),
                "violations": len(check_stack(stack)),
            }
        )
    return rows


def show(name: str, os_family: str = "debian") -> dict[str, Any]:
    from gpuboot.stacks import load_stack
    from gpuboot.stacks.model import COMPONENTS

    stack = load_stack(name)
    return {
        "stack": stack.name,
        "description": stack.description,
        "file": stack.label,
        "profiles": list(stack.profiles),
        "os_family": os_family,
        "components": [_component_row(c, getattr(stack, c), os_family) for c in COMPONENTS],
    }


def check(name: str, profiles: list[str] | None = None) -> dict[str, Any]:
    """Every violation of the stack, against each profile it names (or the ones given)."""
    from gpuboot.profiles import load_profile
    from gpuboot.stacks import check_stack, load_stack

    stack = load_stack(name)
    targets = profiles or list(stack.profiles) or [None]
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for profile_name in targets:
        profile = load_profile(profile_name) if profile_name else None
        for v in check_stack(stack, profile):
            entry = found.setdefault(
                (v.rule_id, v.where, v.message),
                {
                    "rule": v.rule_id,
                    "where": v.where,
                    "message": v.message,
                    "fix": v.fix,
                    "source": v.source,
                    "profiles": [],
                },
            )
            if profile_name:
                entry["profiles"].append(profile_name)
    violations = list(found.values())
    return {"stack": stack.name, "file": stack.label, "profiles": targets, "violations": violations}


def mirror(name: str, os_family: str) -> dict[str, Any]:
    from gpuboot.stacks import OS_FAMILIES, load_stack, mirror_packages

    if os_family not in OS_FAMILIES:
        raise ConfigError(
            f"unknown OS family {os_family!r}",
            where="--os-family",
            hint=f"use one of: {', '.join(OS_FAMILIES)}",
        )
    stack = load_stack(name)
    return {
        "stack": stack.name,
        "os_family": os_family,
        "packages": [{"name": n, "version": v} for n, v in mirror_packages(stack, os_family)],
    }
