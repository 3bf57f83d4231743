"""Software stack rules: the driver that runs is the pinned one (STK-001), every package
the stack pins is installed at its version and held (STK-002), so a later unhold or
upgrade shows up in the next compliance scan, and unattended-upgrades is told to leave
every pinned package alone (STK-003), the OS baseline's second fence behind the holds.

On RHEL/Rocky/Alma nodes the same rules read rpm: the hold is a versionlock entry at the
installed version (and on EL8/EL9 the driver's module stream is the one enabled), and
STK-003's fence is dnf-automatic's timers kept off. An installonly package (the kernel's)
may be installed in several versions: the pinned one installed and locked passes beside
older ones, never beside a newer one (the next boot may choose it). Which family a node's
evidence is comes from the files node_collect gathered for it (rpm_-qa.txt: EL)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

from gpuboot.bundle.model import Evidence, ProbeOutput
from gpuboot.bundle.names import APT_HOLDS_FILE as SHOWHOLD
from gpuboot.bundle.names import APT_UNATTENDED_FILE as APT_CONFIG
from gpuboot.bundle.names import DNF_AUTOMATIC_FILE as DNF_AUTOMATIC
from gpuboot.bundle.names import DNF_MODULES_FILE as MODULES
from gpuboot.bundle.names import DNF_VERSIONLOCK_FILE as VERSIONLOCK
from gpuboot.bundle.names import DPKG_FILE as DPKG
from gpuboot.bundle.names import NVIDIA_VERSION_FILE as NV_VERSION
from gpuboot.bundle.names import RPM_FILE as RPM
from gpuboot.checks.base import (
    FAIL,
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    Result,
    inactive_unit,
    not_applicable,
    parsed,
    probe,
    tool_failure,
)
from gpuboot.components import Component, components, load
from gpuboot.errors import ParseError
from gpuboot.evidence.modules import parse_nvidia_version
from gpuboot.evidence.packages import (
    DNF_AUTOMATIC_TIMERS,
    UU_BLACKLIST,
    DpkgPackage,
    RpmPackage,
    enabled_streams,
    installed_profiles,
    parse_apt_config_list,
    parse_dpkg_query,
    parse_rpm_query,
    parse_showhold,
    parse_systemctl_show,
    parse_versionlock,
    split_nevr,
    with_locks,
)
from gpuboot.stacks.plan import driver_module_profile
from gpuboot.stacks.versions import rpm_compare, upstream_of


@cache
def _pinned_components() -> tuple[Component, ...]:
    """The components with pins, in the order their roles install them (the table's
    roles), as the pin lists are named in messages."""
    table = load()
    order = [r.name for r in table.roles]
    return tuple(
        sorted((c for c in table.components if c.pinned), key=lambda c: order.index(c.role))
    )


def _read(evidence: Evidence, name: str) -> str:
    """stdout of a package tool that must have succeeded: partial package lists would
    name packages missing that are not."""
    out = probe(evidence, name)
    if why := tool_failure(name, out):
        raise ProbeFailed(why, where=name)
    return out.stdout


def is_el(evidence: Evidence) -> bool:
    """An EL node's evidence: node_collect read rpm instead of dpkg for it."""
    return RPM in evidence


def installed_packages(evidence: Evidence) -> Mapping[str, DpkgPackage] | Mapping[str, RpmPackage]:
    """The package database as dpkg-query (EL: rpm) lists it, read-only. Either lists
    itself on every system, so an empty list is an unreadable one, not a node without
    packages."""
    name = RPM if is_el(evidence) else DPKG
    out = probe(evidence, name)
    if why := tool_failure(name, out):
        raise ProbeFailed(why, where=name)
    # STK-001, STK-002 and FAB-001 read the same list: parsed once per node, read-only
    return parsed(_package_db, name, out)


def _package_db(
    name: str, out: ProbeOutput
) -> Mapping[str, DpkgPackage] | Mapping[str, RpmPackage]:
    packages = parse_rpm_query(out.stdout) if name == RPM else parse_dpkg_query(out.stdout)
    if not packages:
        raise ProbeFailed(f"{name} listed no package", where=name)
    return MappingProxyType(packages)


def held_names(evidence: Evidence) -> set[str]:
    """What the node holds: apt-mark's holds, or (EL) the packages a versionlock entry
    holds at exactly their installed version."""
    if not is_el(evidence):
        return parse_showhold(_read(evidence, SHOWHOLD))
    rpms = parse_rpm_query(_read(evidence, RPM))
    locked = with_locks(rpms, parse_versionlock(_read(evidence, VERSIONLOCK)))
    return {name for name, pkg in locked.items() if pkg.held}


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


def driver_daemon_problems(
    evidence: Evidence, ctx: NodeContext, unit: str, label: str, installed: str | None
) -> list[str]:
    """What keeps a daemon NVIDIA ships with each driver release (fabric manager, IMEX) from
    serving: its unit not active, or its package (``installed``, upstream version) not at
    the loaded driver's version, or at the pin's while no driver is loaded."""
    problems = [p for p in [inactive_unit(evidence, unit)] if p]
    loaded = nvidia_version(evidence)  # None: no module loaded (STK-001 says so)
    want = upstream_of(str(ctx.var("nvidia_driver_version", "")))
    if installed is None:
        problems.append(f"no {unit} package installed")
    elif loaded and installed != loaded:
        problems.append(f"{label} {installed} does not match the loaded driver {loaded}")
    elif want and installed != want:
        problems.append(f"{label} {installed}, pinned driver {want}")
    return problems


def check_driver_versions(evidence: Evidence, ctx: NodeContext) -> Result | str | None:
    branch, pinned = ctx.var("nvidia_driver_branch"), ctx.var("nvidia_driver_version")
    if not branch or not pinned:
        raise MissingEvidence(
            "no driver pin (nvidia_driver_branch/_version) for this host", where=ctx.host
        )
    want = upstream_of(str(pinned))
    # the userspace package that carries the pinned version: nvidia-utils-<branch> (apt),
    # nvidia-driver (NVIDIA's RPMs: one name, the branch in the version)
    name = "nvidia-driver" if is_el(evidence) else f"nvidia-utils-{branch}"
    packages = installed_packages(evidence)
    utils = packages.get(name)
    if utils is None or not utils.installed:
        return (
            outside_packages(evidence, packages, ctx)
            or f"{name} is not installed (pinned {pinned})"
        )
    if utils.version != str(pinned):
        return f"{name} is {utils.version}, pinned {pinned}"
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


# Packages that carry an NVIDIA kernel module or its userspace, whoever built them: NVIDIA's
# and Ubuntu's (nvidia-driver-*, -dkms-*, -utils-*, linux-modules-nvidia-*), Debian's
# (nvidia-kernel-*, nvidia-driver), NVIDIA's RPMs (nvidia-driver*, kmod-nvidia-*, nvidia-kmod*).
_DRIVER_PACKAGE = re.compile(
    r"^(nvidia-(driver|dkms|kernel|utils|kmod|open)|linux-(modules|objects)-nvidia|kmod-nvidia)"
)


def outside_packages(
    evidence: Evidence,
    packages: Mapping[str, DpkgPackage] | Mapping[str, RpmPackage],
    ctx: NodeContext,
) -> Result | None:
    """An NVIDIA kernel module loaded while no package of any driver is installed: a driver
    installed outside packages (NVIDIA's .run installer). Packages installed over it fight
    it, so gpuboot install refuses such a node; NVIDIA's way out is its own uninstaller."""
    loaded = nvidia_version(evidence)
    if loaded is None or any(_DRIVER_PACKAGE.match(n) and p.installed for n, p in packages.items()):
        return None
    return Result(
        FAIL,
        f"the NVIDIA driver {loaded} is loaded but no driver package is installed: a driver "
        "installed outside packages (NVIDIA's .run installer)",
        action=(
            f"on {ctx.host}: `nvidia-installer --uninstall` (NVIDIA's removal of a .run "
            f"install), reboot, then `gpuboot install -i <inventory> --limit {ctx.host}`"
        ),
    )


def pinned_packages(ctx: NodeContext) -> list[tuple[str, str]]:
    """(name, version) of every package the host's stack pins (apt ``name=version``, dnf
    ``name-[epoch:]version-release``)."""
    el = ctx.var("gpuboot_os_family", "debian") == "redhat"
    pins = []
    # each component's pin list as the roles take it (gpuboot.stacks.role_vars), unless
    # its switch turns it off (the kernel is pinned only where gpuboot manages it)
    for c in _pinned_components():
        var = f"{c.prefix}_packages"
        if c.switch is not None and ctx.var(c.switch, True) is False:
            continue
        for spec in ctx.var(var) or ():
            if not el:
                name, _, version = str(spec).partition("=")
                pins.append((name, version))
                continue
            try:
                pins.append(split_nevr(str(spec)))
            except ParseError as exc:
                raise MissingEvidence(f"{var}: {exc}", where=ctx.host) from None
    return pins


def required_modules(ctx: NodeContext) -> list[str]:
    """The kernel modules the host's stack loads: each component's of the table that the
    stack enables (one tied to hardware only on a SKU that has it)."""
    mods = []
    for c in components():
        if not c.modules or (c.optional and not ctx.enabled(f"{c.prefix}_enabled")):
            continue
        if c.hardware is None or ctx.hardware[c.hardware]:
            mods.extend(c.modules)
    return mods


def check_pinned_packages(evidence: Evidence, ctx: NodeContext) -> Result | str | None:
    pins = pinned_packages(ctx)
    if not pins:
        # A host pinned by nvidia_driver_* alone has no package lists: STK-001 covers it.
        return not_applicable("no stack package pins for this host")
    el = is_el(evidence)
    packages = installed_packages(evidence)
    if el:  # each seen at the version a lock holds (an installonly kernel: one of several)
        packages = with_locks(packages, parse_versionlock(_read(evidence, VERSIONLOCK)))
    held = set() if el else held_names(evidence)
    sep = "-" if el else "="
    missing, moved, loose, newer = [], [], [], []
    for name, version in pins:
        pkg = packages.get(name)
        if pkg is None or not pkg.installed:
            missing.append(f"{name}{sep}{version}")
        elif not (pkg.has(version) if isinstance(pkg, RpmPackage) else pkg.version == version):
            moved.append(f"{name} {_versions(pkg)} (pinned {version})")
        elif pkg.version != version or not (pkg.held if el else name in held):
            loose.append(name)
        elif el and (above := [v for v in pkg.versions if rpm_compare(v, version) > 0]):
            newer.append(f"{name} {', '.join(above)} (pinned {version})")
    problems = [
        f"{label}: {', '.join(items)}"
        for label, items in (
            ("not installed", missing),
            ("moved", moved),
            ("not held", loose),
            ("a newer version installed beside the pin", newer),
        )
        if items
    ]
    if stream := _stream_problem(evidence, ctx):
        problems.append(stream)
    return "; ".join(problems) or None


def _versions(pkg: DpkgPackage | RpmPackage) -> str:
    return ", ".join(pkg.versions) if isinstance(pkg, RpmPackage) else pkg.version


def _stream_problem(evidence: Evidence, ctx: NodeContext) -> str | None:
    """EL8/EL9: the driver's module stream is the enabled one (another stream would
    offer, and a `dnf module switch-to` install, another branch), and the stack's profile
    (fm on NVSwitch systems) is among those dnf marks [i]nstalled when it marks any."""
    want = str(ctx.var("nvidia_driver_module_stream") or "")
    if not is_el(evidence) or not want:
        return None
    module, _, stream = want.partition(":")
    listing = _read(evidence, MODULES)
    enabled = enabled_streams(listing).get(module)
    if enabled != stream:
        return f"module stream {module}:{enabled or '(none)'} enabled, pinned {want}"
    # derived as role_vars derives it, from variables a bundle keeps
    profile = driver_module_profile(want, ctx.var("nvidia_fabricmanager_enabled", False) is True)
    installed = installed_profiles(listing).get(module, ())
    if profile and installed and profile not in installed:
        return f"module profile {want}/{', '.join(installed)} installed, pinned {want}/{profile}"
    return None


def check_unattended_blacklist(evidence: Evidence, ctx: NodeContext) -> Result | str | None:
    pins = pinned_packages(ctx)
    if not pins:
        return not_applicable("no stack package pins for this host")
    if ctx.var("gpuboot_os_family", "debian") == "redhat":
        return _dnf_automatic_on(evidence)
    patterns = parse_apt_config_list(_read(evidence, APT_CONFIG), UU_BLACKLIST)
    try:
        # unattended-upgrades matches each entry as a Python regular expression (re.match).
        compiled = [re.compile(p) for p in patterns]
    except re.error as exc:
        return f"{UU_BLACKLIST} holds an invalid regular expression: {exc}"
    loose = [name for name, _ in pins if not any(rx.match(name) for rx in compiled)]
    return f"unattended-upgrades may upgrade: {', '.join(loose)}" if loose else None


def _dnf_automatic_on(evidence: Evidence) -> str | None:
    """EL: no dnf-automatic timer enabled or running (versionlock holds the pins; the
    timers would still upgrade everything else around them, unannounced)."""
    units = parse_systemctl_show(_read(evidence, DNF_AUTOMATIC))
    missing = [t for t in DNF_AUTOMATIC_TIMERS if t not in units]
    if missing:
        raise ProbeFailed(f"systemctl show printed no block for {missing[0]}", where=DNF_AUTOMATIC)
    on = []
    for timer in DNF_AUTOMATIC_TIMERS:
        state = (units[timer].get("UnitFileState"), units[timer].get("ActiveState"))
        why = [w for w in state if w in ("enabled", "active")]
        if why:
            on.append(f"{timer} ({', '.join(why)})")
    return f"dnf-automatic may upgrade the node: {', '.join(on)}" if on else None
