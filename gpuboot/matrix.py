"""`gpuboot matrix` and `gpuboot mirror`: the shipped stacks, their checks, mirror lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuboot.errors import BadInput, ConfigError


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
        "components": [_component_row(c, stack.parts[c], os_family) for c in COMPONENTS],
    }


def _fault(exc: ConfigError) -> dict[str, Any]:
    return {
        "rule": "schema",
        "where": exc.where or "",
        "message": exc.message,
        "fix": exc.hint or "",
        "source": "stack schema (gpuboot/stacks/README.md, 'Schema')",
        "profiles": [],
    }


def _judge(stack: Any, profile: dict[str, Any] | None) -> tuple[list[Any], list[str]]:
    """check_stack's rules one at a time: a rule that needs a value with a schema fault
    (NotRead) is named as not judged, and the other rules are still judged."""
    from gpuboot.stacks.model import NotRead
    from gpuboot.stacks.rules import RULES, _Ctx

    ctx = _Ctx(stack=stack, profile=profile, label=stack.label)
    found, not_judged = [], []
    for rule in RULES:
        if rule.needs_profile and profile is None:
            continue
        try:
            found.extend(rule.check(rule, ctx))
        except NotRead:
            not_judged.append(rule.id)
    return found, not_judged


def check(name: str, profiles: list[str] | None = None) -> dict[str, Any]:
    """Every violation of the stack: each schema fault of the file, then each broken
    compatibility rule against each profile it names (or the ones given). A rule that
    needs a value with a schema fault is listed as not checked, never guessed at."""
    from gpuboot.profiles import load_profile
    from gpuboot.stacks import load_stack
    from gpuboot.stacks.model import StackFaults, known
    from gpuboot.stacks.rules import RULES

    try:
        stack, faults, label = load_stack(name), (), None
    except StackFaults as exc:
        stack, faults, label = exc.stack, exc.faults, exc.label
    violations = [_fault(f) for f in faults]
    for p in profiles or []:
        load_profile(p)  # an unknown --profile is bad input of its own
    if stack is None:  # nothing read (not YAML, not a mapping): no rule can be judged
        return {
            "stack": Path(name).stem,
            "file": label or name,
            "profiles": profiles or [],
            "violations": violations,
            "rules_checked": False,
            "rules_not_checked": [r.id for r in RULES],
        }
    declared = list(stack.profiles) if known(stack.profiles) else []
    targets = profiles or declared or [None]
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    skipped: set[str] = set()
    for profile_name in targets:
        profile = load_profile(profile_name) if profile_name else None
        broken, not_judged = _judge(stack, profile)
        skipped.update(not_judged)
        for v in broken:
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
    return {
        "stack": stack.name if known(stack.name) else Path(name).stem,
        "file": stack.label,
        "profiles": targets,
        "violations": violations + list(found.values()),
        "rules_checked": not skipped,
        "rules_not_checked": [r.id for r in RULES if r.id in skipped],
    }


def _extra_pins(extra: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    pins = []
    for item in extra:
        pkg, sep, version = item.partition("=")
        if not (pkg and sep and version):
            raise BadInput(
                f"--probe-tools {item!r} is not NAME=VERSION",
                where="gpuboot mirror --probe-tools",
                hint="the site's probe-tools package as the inventory pins it "
                "(gpuboot_probe_tools_packages), e.g. site-gpu-probes=1.4-1",
            )
        pins.append((pkg, version))
    return pins


def mirror(
    name: str,
    os_family: str,
    repos: list[str] | tuple[str, ...] = (),
    extra: list[str] | tuple[str, ...] = (),
    arch: str | None = None,
) -> dict[str, Any]:
    """What an offline mirror must hold: the pinned packages (and ``extra`` NAME=VERSION),
    with ``repos`` their whole dependency closure from those indexes (gpuboot.mirror)."""
    from gpuboot.stacks import OS_FAMILIES, load_stack, mirror_packages

    if os_family not in OS_FAMILIES:
        raise ConfigError(
            f"unknown OS family {os_family!r}",
            where="--os-family",
            hint=f"use one of: {', '.join(OS_FAMILIES)}",
        )
    stack = load_stack(name)
    pins = list(dict.fromkeys(mirror_packages(stack, os_family) + _extra_pins(extra)))
    doc: dict[str, Any] = {"stack": stack.name, "os_family": os_family}
    if os_family == "redhat":
        # EL8/EL9 mirrors must carry the driver's module stream (modules.yaml) as well:
        # its packages are hidden unless that stream is enabled
        stream = stack.driver.pins_for("redhat").module_stream
        doc["module_streams"] = [stream] if stream else []
    if not repos:
        return {
            **doc,
            "scope": "top-level",
            "packages": [{"name": n, "version": v, "pinned": True} for n, v in pins],
        }
    from gpuboot import mirror as closure_mod

    arch = arch or ("amd64" if os_family == "debian" else "x86_64")
    found = closure_mod.closure(closure_mod.load(list(repos), arch, os_family), pins)
    return {
        **doc,
        "scope": "closure",
        "architecture": arch,
        "repositories": list(repos),
        "packages": found.to_packages(),
        "unsatisfied": found.unsatisfied,
    }
