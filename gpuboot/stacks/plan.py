"""From a stack to what the roles, the offline mirror and an upgrade plan need.

``role_vars`` feeds the Ansible roles, ``mirror_packages`` lists what an air-gapped
mirror must hold, ``compare`` turns a node's installed packages into a plan that says
which changes need a reboot and which only restart a service.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpuboot.components import components as component_table
from gpuboot.errors import ParseError
from gpuboot.evidence.packages import enabled_streams, installed_profiles, is_installonly
from gpuboot.stacks.model import (
    OS_FAMILIES,
    Component,
    Pins,
    Stack,
    check_os_family,
)
from gpuboot.stacks.versions import compare_versions

# "enable"/"switch": the driver's module stream (EL8/EL9); "unknown": it could not be read
Action = Literal["install", "upgrade", "downgrade", "keep", "enable", "switch", "unknown"]

# Kernel-side components: a new version runs only after a reboot (an OFED change also
# unloads nvidia_peermem, and the reboot loads it back). Userspace daemons: a changed
# package takes effect when its service restarts. Both named in gpuboot/components.yaml.
REBOOT_COMPONENTS = frozenset(c.name for c in component_table() if c.reboot)
RESTARTS: dict[str, tuple[str, ...]] = {c.name: c.restarts for c in component_table() if c.restarts}

# Packages that take each other's place across branches, flavors or releases: the old
# one is what the new one upgrades (apt/dnf replace it through Conflicts/Provides).
# Each component's package families per OS family, from gpuboot/components.yaml.
_SLOTS = tuple(
    (re.compile(pattern), slot)
    for pattern, slot in dict.fromkeys(
        pair
        for c in component_table()
        for family in OS_FAMILIES
        for pair in c.families.get(family, ())
    )
)
# Components whose role variables are <prefix>_package/_version/_packages (and
# <prefix>_enabled when a stack may disable them); the kernel's and the driver's are
# written by hand below.
ROLE_VAR_PREFIXES = {c.name: c.prefix for c in component_table() if c.generic_vars}


@dataclass(frozen=True)
class PlanItem:
    package: str
    current: str | None
    desired: str
    action: Action
    reboot: bool
    restarts: tuple[str, ...]
    replaces: str | None = None  # the installed package this one takes over from

    def __str__(self) -> str:
        was = f"{self.replaces} {self.current}" if self.replaces else (self.current or "-")
        tail = (
            " (reboot)"
            if self.reboot
            else (f" (restart {', '.join(self.restarts)})" if self.restarts else "")
        )
        return f"{self.action:9} {self.package} {was} -> {self.desired}{tail}"


def _enabled(stack: Stack) -> list[Component]:
    return [c for c in stack.components() if c.enabled]


def _pin_strings(pins: Pins, os_family: str) -> list[str]:
    # apt takes name=version; dnf takes name-[epoch:]version-release.
    sep = "=" if os_family == "debian" else "-"
    return [f"{p.name}{sep}{p.version}" for p in pins.packages]


def table_vars(os_family: str = "debian") -> dict[str, Any]:
    """What the roles take from gpuboot/components.yaml on a node of ``os_family``, with a
    stack or without one (a driver pinned alone): each component's package patterns its
    role removes first (``<prefix>_supersede``), its kernel modules (``<prefix>_modules``)
    and its systemd units (``<prefix>_services``), where the table names any."""
    check_os_family(os_family)
    out: dict[str, Any] = {}
    for c in component_table():
        if c.supersede and c.families:
            out[f"{c.prefix}_supersede"] = c.supersede_patterns(os_family)
        if c.modules:
            out[f"{c.prefix}_modules"] = list(c.modules)
        if c.services:
            out[f"{c.prefix}_services"] = list(c.services)
    return out


def role_vars(stack: Stack, os_family: str = "debian") -> dict[str, Any]:
    """The variables the roles take, for one OS family (names as in roles/*/defaults):
    the stack's pins and switches, and the table's (``table_vars``)."""
    check_os_family(os_family)
    kernel = stack.kernel_pins(os_family)
    driver = stack.driver.pins_for(os_family)
    out: dict[str, Any] = {
        "gpuboot_stack": stack.name,
        "kernel_version": kernel.release,
        "kernel_package_version": kernel.version,
        "kernel_packages": _pin_strings(kernel, os_family),
        "kernel_hold_method": kernel.hold,
        "kernel_hold_packages": [p.name for p in kernel.packages] + list(kernel.hold_packages),
        "nvidia_driver_branch": stack.driver.branch,
        "nvidia_driver_version": driver.version,
        "nvidia_driver_flavor": stack.driver.flavor,
        "nvidia_driver_packages": _pin_strings(driver, os_family),
    }
    if os_family == "redhat":
        # "" on EL10 (no modularity): the role then pins by versionlock alone
        out["nvidia_driver_module_stream"] = driver.module_stream or ""
        out["nvidia_driver_module_profile"] = driver_module_profile(
            driver.module_stream or "", stack.fabricmanager.enabled
        )
    for c in component_table():
        if c.optional:
            out[f"{c.prefix}_enabled"] = stack.parts[c.name].enabled
    for name, prefix in ROLE_VAR_PREFIXES.items():
        comp = stack.parts[name]
        pins = comp.pins_for(os_family) if comp.enabled else None
        out[f"{prefix}_package"] = pins.package if pins else None
        out[f"{prefix}_version"] = pins.version if pins else None
        out[f"{prefix}_packages"] = _pin_strings(pins, os_family) if pins else []
    return {**out, **table_vars(os_family)}


def driver_module_profile(stream: str, fabricmanager: bool) -> str:
    """The driver stream's profile to install: NVIDIA's driver installation guide installs
    the stream with its fm profile (driver, fabric manager, NSCQ) on NVSwitch systems. The
    stack enables fabric manager exactly on NVSwitch SKUs (CMP-003/CMP-004 check it against
    the SKU profile); no stream (EL10), no profile."""
    return "fm" if fabricmanager and stream else ""


def stream_item(stack: Stack, listing: str | None, unread: str = "") -> PlanItem | None:
    """EL8/EL9: the driver's module stream (with the fm profile on NVSwitch systems) as a
    plan item: a change exactly when the pinned_packages module would make one (another
    stream enabled, or the profile not installed on it). ``listing`` is ``dnf module list
    --enabled`` from dnf's cache; None (``unread`` says why) when the node could not answer.
    None when the stack pins no stream (EL10: versionlock alone)."""
    want = stack.driver.pins_for("redhat").module_stream
    if not want:
        return None
    module, _, stream = want.partition(":")
    profile = driver_module_profile(want, stack.fabricmanager.enabled)
    desired = f"{stream}/{profile}" if profile else stream
    try:
        enabled = None if listing is None else enabled_streams(listing).get(module)
        profiles = () if listing is None else installed_profiles(listing).get(module, ())
    except ParseError as exc:
        listing, unread = None, str(exc)
    if listing is None:
        return PlanItem(f"module {module}", f"unread: {unread}", desired, "unknown", False, ())
    current = f"{enabled}/{','.join(profiles)}" if enabled and profiles else enabled
    if enabled is None:
        action: Action = "enable"
    elif enabled != stream or (profile and profile not in profiles):
        action = "switch"
    else:
        action = "keep"
    return PlanItem(f"module {module}", current, desired, action, False, ())


def mirror_packages(stack: Stack, os_family: str) -> list[tuple[str, str]]:
    """Every (package, version) an offline mirror must hold for this stack, in install order."""
    check_os_family(os_family)
    seen: dict[tuple[str, str], None] = {}
    for comp in _enabled(stack):
        for pkg in comp.pins_for(os_family).packages:
            seen[(pkg.name, pkg.version)] = None
    return list(seen)


def _newest(version: str | tuple[str, ...]) -> str:
    """A version as installed_rpm_versions gives it: an installonly name's several
    versions come oldest first."""
    return version if isinstance(version, str) else version[-1]


def _slot(name: str) -> str | None:
    for pattern, repl in _SLOTS:
        if pattern.match(name):
            return pattern.sub(repl, name)
    return None


def _current(
    name: str,
    installed: Mapping[str, str | tuple[str, ...]],
    desired_names: set[str],
    os_family: str,
) -> tuple[str | tuple[str, ...] | None, str | None]:
    """(installed version, replaced package) for a desired package."""
    if name in installed:
        return installed[name], None
    slot = _slot(name)
    if slot is None:
        return None, None
    rivals = [n for n in installed if n not in desired_names and _slot(n) == slot]
    if not rivals:
        return None, None
    # The newest occupant of the slot is what the node runs now.
    best = rivals[0]
    for other in rivals[1:]:
        if compare_versions(_newest(installed[other]), _newest(installed[best]), os_family) > 0:
            best = other
    return installed[best], best


def compare(
    installed: Mapping[str, str | tuple[str, ...]], stack: Stack, os_family: str
) -> list[PlanItem]:
    """Plan from ``installed`` (package -> version, as ``dpkg-query -W`` prints) to the stack.

    One item per package the stack pins, in install order. A package of another branch
    or flavor that the pinned one replaces counts as its current version (``replaces``).
    On EL an installonly package (the kernel's; installed_rpm_versions gives all its
    versions) is kept when the pinned version is among them, else installed beside them:
    never an upgrade or a downgrade.
    """
    check_os_family(os_family)
    desired_names = {name for name, _ in mirror_packages(stack, os_family)}
    items: list[PlanItem] = []
    done: set[str] = set()
    for comp in _enabled(stack):
        for pkg in comp.pins_for(os_family).packages:
            if pkg.name in done:
                continue
            done.add(pkg.name)
            found, replaces = _current(pkg.name, installed, desired_names, os_family)
            current = found if found is None or isinstance(found, str) else ", ".join(found)
            beside = os_family == "redhat" and is_installonly(pkg.name) and not replaces
            if found is None:
                action: Action = "install"
            elif beside:
                have = (found,) if isinstance(found, str) else found
                action = "keep" if pkg.version in have else "install"
            else:
                order = compare_versions(_newest(found), pkg.version, os_family)
                action = "keep" if order == 0 else ("upgrade" if order < 0 else "downgrade")
            changes = action != "keep"
            items.append(
                PlanItem(
                    package=pkg.name,
                    current=current,
                    desired=pkg.version,
                    action=action,
                    reboot=changes and comp.name in REBOOT_COMPONENTS,
                    restarts=RESTARTS.get(comp.name, ()) if changes else (),
                    replaces=replaces,
                )
            )
    return items


def needs_reboot(plan: list[PlanItem]) -> bool:
    return any(item.reboot for item in plan)


def restarts(plan: list[PlanItem]) -> list[str]:
    """Services to restart when the plan does not reboot anyway (deduplicated, in order)."""
    return list(dict.fromkeys(s for item in plan for s in item.restarts))
