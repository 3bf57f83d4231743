"""``mlxconfig -d <pci> q SRIOV_EN NUM_OF_VFS`` (NVIDIA MFT): the NIC firmware's settings.

After the device lines, ``Configurations:`` heads the value columns (``Next Boot``; with
``-e``: ``Default  Current  Next Boot``), then one row per parameter, its name first (``*``
marks one changed from the default), a value per column: ``True(1)``, ``8``, ``Array[0..7]``.
A setting takes effect at the next boot: the running firmware's NUM_OF_VFS is what the PF's
``sriov_totalvfs`` reads.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "mlxconfig"
NEXT_BOOT = "Next Boot"
_NUMBER = re.compile(r"^(?:\w+\((\d+)\)|(\d+))$")  # "True(1)", "_256KB(1)", "8"


def mlxconfig_file(pci: str) -> str:
    return f"mlxconfig_-d_{pci}_q.txt"


def mlxconfig_command(pci: str) -> str:
    return f"mlxconfig -d {shlex.quote(pci)} q SRIOV_EN NUM_OF_VFS"


@dataclass(frozen=True)
class FirmwareConfig:
    columns: tuple[str, ...]
    rows: dict[str, dict[str, str]]  # parameter -> column -> value as printed

    def number(self, name: str, column: str = NEXT_BOOT) -> int | None:
        """A parameter's value as a number (``True(1)`` -> 1), None when not shown."""
        m = _NUMBER.match(self.rows.get(name, {}).get(column, ""))
        return int(m.group(1) or m.group(2)) if m else None


def parse_mlxconfig_query(text: str) -> FirmwareConfig:
    """The value columns and every whole row; a row with another number of values than
    columns (a long value mlxconfig wraps) is skipped, unless it is a row of ours."""
    require_text(TOOL, text)
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.strip().startswith("Configurations:")), None)
    if head is None:
        raise ParseError(TOOL, "no 'Configurations:' header: not mlxconfig's query")
    columns = tuple(
        re.split(r"\s{2,}", lines[head].strip().removeprefix("Configurations:").strip())
    )
    if NEXT_BOOT not in columns:
        raise ParseError(TOOL, f"no {NEXT_BOOT!r} column in {lines[head].strip()[:80]!r}")
    rows: dict[str, dict[str, str]] = {}
    for number, raw in enumerate(lines[head + 1 :], start=head + 2):
        words = raw.split()
        if not words:
            continue
        name = words[0].lstrip("*")
        if len(words) - 1 != len(columns) or not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            if name in ("SRIOV_EN", "NUM_OF_VFS"):
                raise ParseError(TOOL, f"line {number}: {name} row cut: {raw.strip()[:80]!r}")
            continue
        rows[name] = dict(zip(columns, words[1:], strict=True))
    return FirmwareConfig(columns, rows)
