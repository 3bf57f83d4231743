"""Package facts: ``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'``,
``apt-mark showhold`` and ``apt-config dump`` lists.

The dpkg-query reading is the one the ``gpuboot.node.pinned_packages`` module runs on
the node (the collection's module_utils, stdlib only); here its errors become ParseError.
``apt-mark showhold`` prints one held package per line, ``name:arch`` for a foreign
architecture.
"""

from __future__ import annotations

import re

from gpuboot.ansible.collections.ansible_collections.gpuboot.node.plugins.module_utils import (
    dpkg as _dpkg,
)
from gpuboot.errors import ParseError

DpkgPackage = _dpkg.DpkgPackage

__all__ = [
    "DPKG_QUERY",
    "UU_BLACKLIST",
    "DpkgPackage",
    "installed_versions",
    "parse_apt_config_list",
    "parse_dpkg_query",
    "parse_showhold",
]

DPKG_QUERY = "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'"
UU_BLACKLIST = "Unattended-Upgrade::Package-Blacklist"
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
