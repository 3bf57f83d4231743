"""Software stack rules: the driver that runs is the pinned one (STK-001), every package
the stack pins is installed at its version and held (STK-002), so a later unhold or
upgrade shows up in the next compliance scan, and unattended-upgrades is told to leave
every pinned package alone (STK-003), the OS baseline's second fence behind the holds."""

from __future__ import annotations

import re

from gpuboot.checks.base import (
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    Result,
    not_applicable,
    probe,
    tool_failure,
)
from gpuboot.collect import Evidence
from gpuboot.evidence.modules import parse_nvidia_version
from gpuboot.evidence.packages import (
    UU_BLACKLIST,
    DpkgPackage,
    parse_apt_config_list,
    parse_dpkg_query,
    parse_showhold,
)
from gpuboot.stacks.versions import upstream_of

DPKG = "dpkg-query_-W.txt"
SHOWHOLD = "apt-mark_showhold.txt"
APT_CONFIG = "apt-config_dump_Unattended-Upgrade.txt"
NV_VERSION = "proc_driver_nvidia_version.txt"
# Pin lists as the roles take them (gpuboot.stacks.role_vars), with the switch that turns
# each one off. The kernel is pinned only where gpuboot manages it (not in the lab).
PIN_LISTS = (
    ("kernel_packages", "gpuboot_baseline_manage_kernel"),
    ("doca_ofed_packages", "doca_ofed_enabled"),
    ("nvidia_driver_packages", None),
    ("nvidia_fabricmanager_packages", "nvidia_fabricmanager_enabled"),
    ("nvidia_nscq_packages", "nvidia_nscq_enabled"),
    ("cuda_toolkit_packages", "cuda_toolkit_enabled"),
    ("nvidia_fs_packages", "nvidia_fs_enabled"),
    ("nvidia_container_toolkit_packages", "nvidia_container_toolkit_enabled"),
    ("dcgm_packages", "dcgm_enabled"),
)


def _read(evidence: Evidence, name: str) -> str:
    """stdout of a package tool that must have succeeded: partial package lists would
    name packages missing that are not."""
    out = probe(evidence, name)
    if why := tool_failure(name, out):
        raise ProbeFailed(why, where=name)
    return out.stdout


def installed_packages(evidence: Evidence) -> dict[str, DpkgPackage]:
    """The package database as dpkg-query lists it. dpkg lists itself on every Debian
    system, so an empty list is an unreadable one, not a node without packages."""
    packages = parse_dpkg_query(_read(evidence, DPKG))
    if not packages:
        raise ProbeFailed("dpkg-query listed no package", where=DPKG)
    return packages


def nvidia_version(evidence: Evidence) -> str | None:
    """The loaded kernel module's version from /proc/driver/nvidia/version; None when the
    file is absent (cat exits 1: no nvidia module loaded). The kernel writes whole lines:
    text without its line end, or none at all from a successful cat, was cut or lost."""
    out = probe(evidence, NV_VERSION)
    if out.rc == 1 and not out.stdout.strip():
        return None
    if "\n" not in out.stdout:
        raise ProbeFailed(f"{NV_VERSION} is empty or cut mid-line", where=NV_VERSION)
    return parse_nvidia_version(out.stdout).version


def check_driver_versions(evidence: Evidence, ctx: NodeContext) -> str | None:
    branch, pinned = ctx.var("nvidia_driver_branch"), ctx.var("nvidia_driver_version")
    if not branch or not pinned:
        raise MissingEvidence(
            "no driver pin (nvidia_driver_branch/_version) for this host", where=ctx.host
        )
    want = upstream_of(str(pinned))
    utils = installed_packages(evidence).get(f"nvidia-utils-{branch}")
    if utils is None or not utils.installed:
        return f"nvidia-utils-{branch} is not installed (pinned {pinned})"
    if utils.version != str(pinned):
        return f"nvidia-utils-{branch} is {utils.version}, pinned {pinned}"
    loaded = nvidia_version(evidence)
    if loaded is None:
        return f"no NVIDIA kernel module loaded (userspace {upstream_of(utils.version)} installed)"
    pending = probe(evidence, "reboot-required.txt").stdout.strip()
    if loaded != want:
        extra = " (reboot pending)" if pending else ""
        return f"kernel module {loaded} loaded, userspace and pin are {want}{extra}"
    if pending:
        return f"reboot pending: {pending.splitlines()[0]}"
    return None


def pinned_packages(ctx: NodeContext) -> list[tuple[str, str]]:
    """(name, version) of every package the host's stack pins (apt ``name=version``)."""
    pins = []
    for var, switch in PIN_LISTS:
        if switch is not None and ctx.var(switch, True) is False:
            continue
        for spec in ctx.var(var) or ():
            name, _, version = str(spec).partition("=")
            pins.append((name, version))
    return pins


def check_pinned_packages(evidence: Evidence, ctx: NodeContext) -> Result | str | None:
    pins = pinned_packages(ctx)
    if not pins:
        # A host pinned by nvidia_driver_* alone has no package lists: STK-001 covers it.
        return not_applicable("no stack package pins for this host")
    packages = installed_packages(evidence)
    held = parse_showhold(_read(evidence, SHOWHOLD))
    missing, moved, loose = [], [], []
    for name, version in pins:
        pkg = packages.get(name)
        if pkg is None or not pkg.installed:
            missing.append(f"{name}={version}")
        elif pkg.version != version:
            moved.append(f"{name} {pkg.version} (pinned {version})")
        elif name not in held:
            loose.append(name)
    problems = [
        f"{label}: {', '.join(items)}"
        for label, items in (("not installed", missing), ("moved", moved), ("not held", loose))
        if items
    ]
    return "; ".join(problems) or None


def check_unattended_blacklist(evidence: Evidence, ctx: NodeContext) -> Result | str | None:
    if ctx.var("gpuboot_os_family", "debian") != "debian":
        return not_applicable("unattended-upgrades is Debian's")
    pins = pinned_packages(ctx)
    if not pins:
        return not_applicable("no stack package pins for this host")
    patterns = parse_apt_config_list(_read(evidence, APT_CONFIG), UU_BLACKLIST)
    try:
        # unattended-upgrades matches each entry as a Python regular expression (re.match).
        compiled = [re.compile(p) for p in patterns]
    except re.error as exc:
        return f"{UU_BLACKLIST} holds an invalid regular expression: {exc}"
    loose = [name for name, _ in pins if not any(rx.match(name) for rx in compiled)]
    return f"unattended-upgrades may upgrade: {', '.join(loose)}" if loose else None
