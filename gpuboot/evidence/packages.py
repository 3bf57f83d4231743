"""Package facts: ``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'``,
``apt-mark showhold`` and ``apt-config dump`` lists on Debian/Ubuntu; on RHEL/Rocky/Alma
``rpm -qa --qf``, ``dnf versionlock list``, ``dnf module list --enabled`` and the
dnf-automatic timers' ``systemctl show``.

The dpkg-query and rpm/dnf readings are the ones the ``gpuboot.node.pinned_packages``
module runs on the node (the collection's module_utils dpkg.py and rpm.py, stdlib only);
here their errors become ParseError.
``apt-mark showhold`` prints one held package per line, ``name:arch`` for a foreign
architecture.
"""

from __future__ import annotations

import functools
import re

from gpuboot.ansible.collections.ansible_collections.gpuboot.node.plugins.module_utils import (
    dpkg as _dpkg,
)
from gpuboot.ansible.collections.ansible_collections.gpuboot.node.plugins.module_utils import (
    rpm as _rpm,
)
from gpuboot.errors import ParseError

DpkgPackage = _dpkg.DpkgPackage
RpmPackage = _rpm.RpmPackage
ModuleStream = _rpm.ModuleStream

__all__ = [
    "DNF_AUTOMATIC_SHOW",
    "DNF_AUTOMATIC_TIMERS",
    "DNF_MODULE_LIST",
    "DNF_VERSIONLOCK_LIST",
    "DPKG_QUERY",
    "RPM_QUERY",
    "UU_BLACKLIST",
    "DpkgPackage",
    "ModuleStream",
    "RpmPackage",
    "enabled_streams",
    "installed_profiles",
    "installed_rpm_versions",
    "installed_versions",
    "is_installonly",
    "parse_apt_config_list",
    "parse_dpkg_query",
    "parse_module_list",
    "parse_rpm_query",
    "parse_showhold",
    "parse_systemctl_show",
    "parse_versionlock",
    "split_nevr",
    "with_locks",
]

DPKG_QUERY = "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'"
UU_BLACKLIST = "Unattended-Upgrade::Package-Blacklist"
# The same format the module reads (module_utils/rpm.py QUERY_FORMAT), for a shell.
RPM_QUERY = f"rpm -qa --qf '{_rpm.QUERY_FORMAT}'"
# The list is a local file: no repository is loaded (no metadata refresh, no network).
DNF_VERSIONLOCK_LIST = "dnf -q --disablerepo='*' versionlock list"
# From dnf's metadata cache (-C: certify never refreshes it). dnf exits 1 printing "No
# matching Modules to list" when no stream is enabled: an answer, so exit 0 then.
DNF_MODULE_LIST = (
    "out=$(dnf -q -C module list --enabled 2>&1); rc=$?; printf '%s\\n' \"$out\"; "
    f"case \"$out\" in *'{_rpm.MODULE_NONE}'*) exit 0;; esac; exit $rc"
)
DNF_AUTOMATIC_TIMERS = (
    "dnf-automatic.timer",
    "dnf-automatic-install.timer",
    "dnf-automatic-download.timer",
    "dnf-automatic-notifyonly.timer",
)
# one block per unit, "Key=value" lines; a unit that does not exist prints an empty
# UnitFileState and ActiveState=inactive (exit 0)
DNF_AUTOMATIC_SHOW = "systemctl show --property=Id,UnitFileState,ActiveState " + " ".join(
    DNF_AUTOMATIC_TIMERS
)
# Debian policy 5.6.1: lower case letters, digits, + - . (at least two, alphanumeric first);
# apt-mark adds ":arch" for a foreign architecture
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?$")
# every line of `apt-config dump` is `Name "value";` (list entries end their name in ::)
_APT_CONFIG_LINE = re.compile(r'^\S+ ".*";$')


def parse_dpkg_query(text: str) -> dict[str, DpkgPackage]:
    """Every package line of the query, installed or not (name -> package)."""
    try:
        return _dpkg.parse_dpkg_query(text)
    except _dpkg.DpkgParseError as exc:
        raise ParseError("dpkg-query", str(exc)) from exc


def installed_versions(text: str) -> dict[str, str]:
    """package -> version of what dpkg reports installed (held or not)."""
    return {p.name: p.version for p in parse_dpkg_query(text).values() if p.installed}


def parse_showhold(text: str) -> set[str]:
    """Names apt-mark reports held (the architecture qualifier dropped)."""
    names = [line.strip() for line in text.splitlines() if line.strip()]
    for name in names:
        if not _PACKAGE.match(name):
            raise ParseError("apt-mark showhold", f"not a package name: {name[:80]!r}")
    return {name.split(":", 1)[0] for name in names}


def parse_apt_config_list(text: str, key: str) -> list[str]:
    """Values of a list option in ``apt-config dump`` output, whose entries print as
    ``Unattended-Upgrade::Package-Blacklist:: "^nvidia-";`` (the bare key line carries
    the empty scalar ``""`` and is skipped)."""
    prefix = f"{key}:: "
    values = []
    for line in text.splitlines():
        if line.strip() and not _APT_CONFIG_LINE.match(line):
            raise ParseError("apt-config", f"not an apt-config dump line: {line[:80]!r}")
        if not line.startswith(prefix):
            continue
        value = line[len(prefix) :].strip()
        if not (value.startswith('"') and value.endswith('";')):
            raise ParseError("apt-config", f"unreadable list entry: {line[:80]!r}")
        values.append(value[1:-2])
    return values


def _rpm_call(tool: str, parse, text: str):
    try:
        return parse(text)
    except _rpm.RpmParseError as exc:
        raise ParseError(tool, str(exc)) from exc


def parse_rpm_query(text: str) -> dict[str, RpmPackage]:
    """Every installed package ``rpm -qa --qf`` lists (name -> package)."""
    return _rpm_call("rpm -qa", _rpm.parse_rpm_query, text)


def installed_rpm_versions(text: str) -> dict[str, str | tuple[str, ...]]:
    """package -> ``[epoch:]version-release`` as the stacks write RPM versions; an
    installonly name (the kernel's) installed in several versions -> all of them, oldest
    first (dnf installs a kernel beside the others: none of them is "the" version)."""
    from gpuboot.stacks.versions import rpm_compare

    out: dict[str, str | tuple[str, ...]] = {}
    for p in parse_rpm_query(text).values():
        ordered = sorted(p.versions, key=functools.cmp_to_key(rpm_compare))
        out[p.name] = tuple(ordered) if len(ordered) > 1 else p.version
    return out


def is_installonly(name: str) -> bool:
    """An rpm dnf installs beside its other versions, never over them (the kernel's)."""
    return _rpm.is_installonly(name)


def parse_versionlock(text: str) -> list[str]:
    """The entries ``dnf versionlock list`` prints."""
    return _rpm_call("dnf versionlock list", _rpm.parse_versionlock, text)


def with_locks(packages: dict[str, RpmPackage], entries: list[str]) -> dict[str, RpmPackage]:
    """The packages, each held (``locked``) when versionlock holds its installed version."""
    return _rpm.with_locks(packages, entries)


def parse_module_list(text: str) -> list[ModuleStream]:
    """The rows of ``dnf module list`` tables (enabled streams carry [e])."""
    return _rpm_call("dnf module list", _rpm.parse_module_list, text)


def enabled_streams(text: str) -> dict[str, str]:
    """module -> enabled stream, from ``dnf module list [--enabled]``."""
    return _rpm.enabled_streams(parse_module_list(text))


def installed_profiles(text: str) -> dict[str, tuple[str, ...]]:
    """module -> the profiles dnf marks ``[i]`` on its enabled stream."""
    return _rpm.installed_profiles(parse_module_list(text))


def split_nevr(spec: str) -> tuple[str, str]:
    """A dnf pin ``name-[epoch:]version-release`` -> (name, version)."""
    return _rpm_call("pin", _rpm.split_nevr, spec)


_SHOW_LINE = re.compile(r"^([A-Za-z]+)=(.*)$")


def parse_systemctl_show(text: str) -> dict[str, dict[str, str]]:
    """``systemctl show --property=Id,...`` for several units: unit Id -> its properties.
    Each unit's block ends at a blank line; a block without an Id is unreadable."""
    units: dict[str, dict[str, str]] = {}
    for block in re.split(r"\n\s*\n", text.strip()):
        if not block.strip():
            continue
        props: dict[str, str] = {}
        for line in block.splitlines():
            match = _SHOW_LINE.match(line.strip())
            if not match:
                raise ParseError("systemctl show", f"not a Key=value line: {line[:80]!r}")
            props[match[1]] = match[2]
        if not props.get("Id"):
            raise ParseError("systemctl show", f"a unit block without Id: {block[:80]!r}")
        units[props["Id"]] = props
    return units
