"""Each host's view: its profile and software choice checked (stack or driver pins, MIG
layout, OS family), and the role variables gpuboot derives from them, in one place for
install (the roles), plan and the checks (certify, scan, molecule's verifier)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot.errors import ConfigError
from gpuboot.inventory.rdma import check_rdma_vars

if TYPE_CHECKING:
    from gpuboot.stacks.model import Stack
    from gpuboot.stacks.rules import Violation

PROFILE_FIX = "set a SKU profile from gpuboot/profiles/ (`gpuboot lab up` writes one)"
# A host names its software either as a whole stack or, for the driver alone, as pins.
PIN_VARS = ("nvidia_driver_branch", "nvidia_driver_version")
STREAM_VAR = "nvidia_driver_module_stream"  # EL8/EL9: the driver branch's dnf module stream
PIN_FIX = (
    "set gpuboot_stack to a stack (`gpuboot matrix list`), or pin the driver alone with "
    'nvidia_driver_branch (e.g. "550") and nvidia_driver_version (e.g. "550.54.15-1")'
)

# The OS families gpuboot can converge and certify: Debian/Ubuntu (apt, dpkg) and
# RHEL/Rocky/Alma (dnf, rpm, versionlock, module streams on EL8/EL9).
NODE_OS_FAMILIES = ("debian", "redhat")


@dataclass(frozen=True)
class HostView:
    """One host as every verb sees it, derived once when the inventory is loaded: its
    inventory variables, its SKU profile, its stack (None: the driver pinned alone) and the
    role variables gpuboot derives from them (derive_role_vars)."""

    name: str
    inventory_vars: dict[str, Any]  # merged group + host variables, as Ansible reads them
    profile: dict[str, Any]
    stack: Stack | None
    role_vars: dict[str, Any]

    @property
    def vars(self) -> dict[str, Any]:
        """The variables install hands the roles and certify judges with: the derived win."""
        return {**self.inventory_vars, **self.role_vars}


def check_hosts(path: Path, hosts: dict[str, dict[str, Any]]) -> dict[str, HostView]:
    """Every host's profile and software choice, checked before any host is touched, and
    its view; every broken compatibility rule of every host is reported at once."""
    from gpuboot.report.extent import check_inventory_policies

    _check_os_families(path, hosts)
    check_inventory_policies(path, hosts)  # gpuboot_accept_partial: known gap names only
    shared = _Shared()
    problems: list[str] = []
    fixes: list[str] = []
    views: dict[str, HostView] = {}
    for host, hostvars in hosts.items():
        profile = _host_profile(path, host, hostvars, shared)
        check_rdma_vars(path, host, hostvars, profile)  # pod RDMA: gpuboot_rdma_*
        layout = _mig_layout(hostvars, profile, f"{path}: {host}.gpuboot_mig")
        stack = _host_stack(path, host, hostvars, shared)
        if stack is not None:
            for v in shared.violations(stack, profile, f"{path}: {host}.gpuboot_stack"):
                problems.append(f"{v.rule_id} {v.where}: {v.message}")
                fixes.append(v.fix)
        role_vars = derive_role_vars(hostvars, profile, layout, stack)
        views[host] = HostView(host, hostvars, profile, stack, role_vars)
    if problems:
        raise ConfigError(
            f"{len(problems)} compatibility rule(s) broken: " + "; ".join(problems),
            where=str(path),
            hint="; ".join(dict.fromkeys(fixes)),
        )
    return views


class _Shared:
    """What a fleet's hosts have in common, worked out once per load: a thousand hosts
    name a few profiles and stacks, each read and checked once. Hosts naming one profile
    share one copy of it (nothing changes a host's profile after the load). Only what
    loaded is kept: a name that does not load is refused for the first host naming it,
    with that host's key, as before."""

    def __init__(self) -> None:
        self.profiles: dict[str, dict[str, Any]] = {}
        self.stacks: dict[str, Stack] = {}
        # (stack, profile) by identity, both held by the views: pairs that break no rule
        self._compatible: set[tuple[int, int]] = set()

    def violations(self, stack: Stack, profile: dict[str, Any], where: str) -> list[Violation]:
        """check_stack's violations for this host; the same stack on the same profile
        breaks the same rules, so a compatible pair is checked once (where only names
        the host in a violation)."""
        from gpuboot.stacks import check_stack

        pair = (id(stack), id(profile))
        if pair in self._compatible:
            return []
        found = check_stack(stack, profile, where=where)
        if not found:
            self._compatible.add(pair)
        return found


def _host_profile(
    path: Path, host: str, hostvars: dict[str, Any], shared: _Shared
) -> dict[str, Any]:
    from gpuboot.profiles import load_profile

    if "gpuboot_profile" not in hostvars:
        raise ConfigError(
            f"host {host} has no gpuboot_profile",
            where=f"{path}: {host}.gpuboot_profile",
            hint=PROFILE_FIX,
        )
    name = hostvars["gpuboot_profile"]
    if isinstance(name, str) and name in shared.profiles:
        return shared.profiles[name]
    try:
        profile = load_profile(name)
    except ConfigError as exc:
        raise ConfigError(
            exc.message, where=f"{path}: {host}.gpuboot_profile", hint=exc.hint
        ) from exc
    if isinstance(name, str):
        shared.profiles[name] = profile
    return profile


def _host_stack(path: Path, host: str, hostvars: dict[str, Any], shared: _Shared) -> Stack | None:
    """The host's stack, or None where it pins the driver alone (those pins checked)."""
    from gpuboot.stacks import load_stack

    stack_name = hostvars.get("gpuboot_stack")
    if stack_name is None:
        missing = [v for v in PIN_VARS if v not in hostvars]
        if missing:
            raise ConfigError(
                f"host {host} names neither gpuboot_stack nor {missing[0]}",
                where=f"{path}: {host}.{missing[0]}",
                hint=PIN_FIX,
            )
        _check_driver_pins(path, host, hostvars)
        return None
    clash = [v for v in PIN_VARS if v in hostvars]
    if clash:
        raise ConfigError(
            f"host {host} sets both gpuboot_stack and {clash[0]}",
            where=f"{path}: {host}.{clash[0]}",
            hint="the stack pins the driver: remove the separate pin",
        )
    if isinstance(stack_name, str) and stack_name in shared.stacks:
        return shared.stacks[stack_name]
    try:
        stack = load_stack(stack_name)
    except ConfigError as exc:
        raise ConfigError(
            exc.message, where=f"{path}: {host}.gpuboot_stack", hint=exc.hint
        ) from exc
    if isinstance(stack_name, str):
        shared.stacks[stack_name] = stack
    return stack


def _check_driver_pins(path: Path, host: str, hostvars: dict[str, Any]) -> None:
    """Driver pins reach package names and the apt preferences template: the same
    checks as a stack's driver (gpuboot/stacks/model.py), one implementation."""
    from gpuboot.stacks.model import _BRANCH_RE, FLAVORS, _Reader
    from gpuboot.stacks.versions import PACKAGE_VERSION_RE, upstream_of

    r = _Reader(str(path))
    key = {v: f"{host}.{v}" for v in (*PIN_VARS, "nvidia_driver_flavor", STREAM_VAR)}
    family = str(hostvars.get("gpuboot_os_family", "debian"))
    example = "3:550.54.15-1.el9" if family == "redhat" else "550.54.15-1"
    branch = hostvars[PIN_VARS[0]]
    if isinstance(branch, int) and not isinstance(branch, bool):
        branch = str(branch)  # an INI inventory's `nvidia_driver_branch=550` is a number
    branch = r.string(branch, key[PIN_VARS[0]], _BRANCH_RE, "550")
    version = r.string(hostvars[PIN_VARS[1]], key[PIN_VARS[1]], PACKAGE_VERSION_RE[family], example)
    if family == "redhat" and "-" not in version:
        # the driver role installs name-[epoch:]version-release: without the release no
        # package matches, on every host
        raise r.error(
            key[PIN_VARS[1]],
            f"EL driver version {version!r} has no release",
            f"write it as dnf names it, e.g. {example!r}",
        )
    if not upstream_of(version).startswith(f"{branch}."):
        raise r.error(
            key[PIN_VARS[1]],
            f"driver {version} is not on branch {branch}",
            f"set nvidia_driver_branch to {upstream_of(version).split('.')[0]!r} or pick a "
            f"{branch}.x driver",
        )
    flavor = hostvars.get("nvidia_driver_flavor")
    if flavor is not None and flavor not in FLAVORS:
        raise r.error(
            key["nvidia_driver_flavor"], f"unknown flavor {flavor!r}", "use open or proprietary"
        )
    stream = hostvars.get(STREAM_VAR)
    if family == "redhat" and stream not in (None, ""):
        # the driver role enables this stream and installs the pins from it: another
        # branch's (or an unknown) stream would fail on every host, one at a time
        want = f"nvidia-driver:{branch}-{'open' if flavor == 'open' else 'dkms'}"
        if stream != want:
            raise r.error(
                key[STREAM_VAR],
                f"module stream {stream!r} is not driver branch {branch}'s "
                f"({flavor or 'proprietary'} flavor)",
                f'set {STREAM_VAR}: "{want}", or "" on EL10 (no modularity: versionlock only)',
            )


def profile_vars(profile: dict[str, Any], hostvars: dict[str, Any]) -> dict[str, Any]:
    """Role variables that follow from the SKU's hardware, unless the inventory sets them."""
    nics = profile.get("hardware", {}).get("nics", [])
    derived = {
        "gpuboot_roce_interfaces": [n["netdev"] for n in nics if n.get("link_layer") == "Ethernet"]
    }
    return {k: v for k, v in derived.items() if k not in hostvars}


def derive_role_vars(
    hostvars: dict[str, Any],
    profile: dict[str, Any],
    mig_layout: dict[str, Any],
    stack: Stack | None,
) -> dict[str, Any]:
    """The role variables gpuboot derives for a host, made in this one place for install
    (the roles), plan and certify/scan (the checks): the profile's hardware facts the
    inventory leaves unset, the checked ``gpuboot_mig`` layout, and the stack's pins (the
    stack wins over the inventory). A host that pins its driver without a stack still
    gets the component table's columns (package patterns, kernel modules, units): the
    roles read them from here, never from a copy of their own."""
    from gpuboot.stacks import role_vars, table_vars

    os_family = hostvars.get("gpuboot_os_family", "debian")
    derived = profile_vars(profile, hostvars)
    derived.update(mig_layout)
    derived.update(role_vars(stack, os_family) if stack is not None else table_vars(os_family))
    return derived


def _mig_layout(hostvars: dict[str, Any], profile: dict[str, Any], where: str) -> dict[str, Any]:
    """``{"nvidia_mig_layout": ...}`` for a host with ``gpuboot_mig``, else {}."""
    if hostvars.get("gpuboot_mig") is None:
        return {}
    from gpuboot.mig import layout_vars

    return layout_vars(hostvars["gpuboot_mig"], profile, where)


def _check_os_families(path: Path, hosts: dict[str, dict[str, Any]]) -> None:
    """Refuse, before any host is touched, nodes whose package manager the roles lack:
    on a RHEL/Rocky node every apt task would fail one host at a time instead."""
    other = {h: str(v.get("gpuboot_os_family", "debian")) for h, v in hosts.items()}
    other = {h: fam for h, fam in other.items() if fam not in NODE_OS_FAMILIES}
    if not other:
        return
    host, family = next(iter(other.items()))
    named = ", ".join(f"{h} ({fam})" for h, fam in other.items())
    raise ConfigError(
        f"gpuboot_os_family {family!r} is not supported on nodes ({named}): the roles "
        "install and pin with apt/dpkg or dnf/rpm only",
        where=f"{path}: {host}.gpuboot_os_family",
        hint="set gpuboot_os_family to debian (Debian/Ubuntu, the default) or redhat "
        "(RHEL/Rocky/Alma)",
    )
