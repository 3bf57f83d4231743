# The one reading of dpkg-query's package list: the pinned_packages module runs it on the
# node (inside AnsiballZ, so stdlib only) and gpuboot.evidence.packages on the controller.
"""``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'``, read strictly.

``db:Status-Abbrev`` is three characters (dpkg-query(1)): the desired action
(u unknown, i install, h hold, r remove, p purge), the package state (n not-installed,
c config-files, H half-installed, U unpacked, F half-configured, W triggers-awaiting,
t triggers-pending, i installed) and an error flag (space, or R reinst-required).
So ``hi `` is installed and held, ``rc `` removed with its configuration left.
A line that does not read so is an error, never a guess: a node answers this query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

QUERY_FORMAT = "${Package}\t${Version}\t${db:Status-Abbrev}\n"
QUERY_ARGV = ("dpkg-query", "-W", "-f", QUERY_FORMAT)
WANTS = "uihrp"
STATES = "ncHUFWti"
# Debian policy 5.6.1 (${Package} carries no ":arch") and 5.6.12 (epoch, upstream, revision)
NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION = re.compile(r"^(?:[0-9]+:)?[A-Za-z0-9.+~-]+$")


class DpkgParseError(ValueError):
    """dpkg-query printed something that is not its package list."""


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

    @property
    def present(self) -> bool:
        """Files of it on the node (installed or half-way), not just its configuration."""
        return self.state not in ("n", "c")


def _line_error(line: str, why: str) -> DpkgParseError:
    return DpkgParseError(f"{why}: expected 'name<TAB>version<TAB>status', got {line[:80]!r}")


def parse_dpkg_query(text: str) -> dict[str, DpkgPackage]:
    """Every package line of the query, installed or not (name -> package; a package
    of two architectures prints its name twice, the last line wins)."""
    packages: dict[str, DpkgPackage] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3 or len(parts[2]) < 2:
            raise _line_error(line, "unreadable dpkg-query line")
        name, version, status = parts
        want, state = status[0], status[1]
        if not NAME.match(name) or want not in WANTS or state not in STATES:
            raise _line_error(line, "not a package line")
        # a package dpkg only knows of ("un") has no version; any other must carry one
        if (version or state != "n") and not VERSION.match(version):
            raise _line_error(line, "not a Debian version")
        packages[name] = DpkgPackage(name, version, want, state)
    return packages
