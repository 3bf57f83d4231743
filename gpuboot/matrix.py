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
        "components": [_component_row(c, getattr(stack, c), os_family) for c in COMPONENTS],
    }


def _fault(exc: ConfigError) -> dict[str, Any]:
    return {
        "rule": "schema",
        "where": exc.where or "",
        "message": exc.message,
        "fix": exc.hint or "",
        "source": "stack schema (README.md, 'Version stacks')",
        "profiles": [],
    }


def schema_faults(name: str) -> list[ConfigError]:
    """Every top-level section's first schema fault (the reader stops at one): the file is
    read again with each faulty section replaced by a shipped stack's (known good) one, so
    the faults of the other sections still show. Sections are read independently."""
    import yaml

    from gpuboot.stacks import STACK_DIR, list_stacks, load_stack
    from gpuboot.stacks.model import parse_stack

    try:
        load_stack(name)
        return []
    except ConfigError as exc:
        faults = [exc]
    path = Path(name) if "/" in name or name.endswith((".yaml", ".yml")) else None
    if path is None:  # a shipped stack that does not read: nothing more to learn
        return faults
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        template = yaml.safe_load((STACK_DIR / f"{list_stacks()[0]}.yaml").read_text())
    except (OSError, yaml.YAMLError):  # the first fault already says so
        return faults
    label = (faults[0].where or "").split(": ", 1)[0]
    patched: set[str] = set()
    while isinstance(data, dict):
        where = faults[-1].where or ""
        if not where.startswith(f"{label}: "):
            break
        section = where[len(label) + 2 :].split(".", 1)[0].split("[", 1)[0]
        if section in patched:  # the template's own section does not read here
            break
        patched.add(section)
        if section == "name":
            data["name"] = path.stem
        elif section in template:
            data[section] = template[section]
        else:  # an unknown top-level key
            data.pop(section, None)
        try:
            parse_stack(data, path, label)
            break
        except ConfigError as exc:
            faults.append(exc)
    return faults


def check(name: str, profiles: list[str] | None = None) -> dict[str, Any]:
    """Every violation of the stack, against each profile it names (or the ones given).
    A stack file that does not read lists every section's schema fault instead (the
    compatibility rules need a whole stack)."""
    from gpuboot.profiles import load_profile
    from gpuboot.stacks import check_stack, load_stack

    faults = schema_faults(name)
    if faults:
        for p in profiles or []:
            load_profile(p)  # an unknown --profile is still bad input of its own
        return {
            "stack": Path(name).stem,
            "file": name,
            "profiles": profiles or [],
            "violations": [_fault(f) for f in faults],
            "rules_checked": False,
        }
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
    return {
        "stack": stack.name,
        "file": stack.label,
        "profiles": targets,
        "violations": violations,
        "rules_checked": True,
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
