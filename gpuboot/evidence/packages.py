"""Package facts: ``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'``
and ``apt-mark showhold``.

``db:Status-Abbrev`` is three characters (dpkg-query(1)): the desired action
(u unknown, i install, h hold, r remove, p purge), the package state (n not-installed,
c config-files, H half-installed, U unpacked, F half-configured, W triggers-awaiting,
t triggers-pending, i installed) and an error flag (space, or R reinst-required).
So ``hi `` is installed and held, ``rc `` removed with its configuration left.
``apt-mark showhold`` prints one held package per line, ``name:arch`` for a foreign
architecture.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuboot.errors import ParseError

DPKG_QUERY = "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'"


@dataclass(frozen=True)
class DpkgPackage:
    name: str
    version: str
    want: str  # desired action: i install, h hold, r remove, p purge, u unknown
    state: str  # i installed, c config-files, n not installed, ...

    @property
    def installed(self) -> bool:
        return self.state == "i"

    @property
    def held(self) -> bool:
        return self.want == "h"


def parse_dpkg_query(text: str) -> dict[str, DpkgPackage]:
    """Every package line of the query, installed or not (name -> package)."""
    packages: dict[str, DpkgPackage] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3 or len(parts[2]) < 2:
            raise ParseError(
                "dpkg-query", f"expected 'name<TAB>version<TAB>status', got {line[:80]!r}"
            )
        name, version, status = parts
        packages[name] = DpkgPackage(name, version, status[0], status[1])
    return packages


def installed_versions(text: str) -> dict[str, str]:
    """package -> version of what dpkg reports installed (held or not)."""
    return {p.name: p.version for p in parse_dpkg_query(text).values() if p.installed}


def parse_showhold(text: str) -> set[str]:
    """Names apt-mark reports held (the architecture qualifier dropped)."""
    return {line.strip().split(":", 1)[0] for line in text.splitlines() if line.strip()}
