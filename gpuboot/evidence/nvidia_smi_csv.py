"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

Rows are kept generic (field name -> cleaned string) because the query list is chosen by
the probe; typed accessors and a few named facts sit on top. Header units such as
``memory.total [MiB]`` are split off into ``units``. ``[N/A]``/``[Not Supported]`` -> None.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import clean, require_text, to_bool, to_float, to_int

TOOL = "nvidia-smi --query-gpu"

_FIELD = re.compile(r"^([A-Za-z_][\w.]*)(?:\s*\[([^\]]+)\])?$")


@dataclass(frozen=True)
class CsvGpuRow:
    values: dict[str, str | None]

    def text(self, name: str) -> str | None:
        return self.values.get(name)

    def as_int(self, name: str) -> int | None:
        return to_int(self.values.get(name))

    def as_float(self, name: str) -> float | None:
        return to_float(self.values.get(name))

    def as_bool(self, name: str) -> bool | None:
        return to_bool(self.values.get(name))

    @property
    def index(self) -> int | None:
        return self.as_int("index")

    @property
    def pcie_gen_current(self) -> int | None:
        return self.as_int("pcie.link.gen.current")

    @property
    def pcie_gen_max(self) -> int | None:
        return self.as_int("pcie.link.gen.max")

    @property
    def pcie_width_current(self) -> int | None:
        return self.as_int("pcie.link.width.current")

    @property
    def pcie_width_max(self) -> int | None:
        return self.as_int("pcie.link.width.max")

    @property
    def remap_pending(self) -> bool | None:
        return self.as_bool("remapped_rows.pending")

    @property
    def remap_failure(self) -> bool | None:
        return self.as_bool("remapped_rows.failure")

    @property
    def clocks_event_reasons_active_mask(self) -> int | None:
        # Older drivers call the same bitmask clocks_throttle_reasons.active.
        for name in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
            if name in self.values:
                return self.as_int(name)
        return None

    @property
    def mig_mode_current(self) -> bool | None:
        return self.as_bool("mig.mode.current")


@dataclass(frozen=True)
class QueryCsv:
    fields: tuple[str, ...]
    units: dict[str, str]  # field -> unit from the header ("MiB", "W", "%")
    rows: tuple[CsvGpuRow, ...]


def _header(cells: list[str]) -> tuple[list[str], dict[str, str]] | None:
    names, units = [], {}
    for cell in cells:
        m = _FIELD.match(cell.strip())
        if not m or not re.search(r"[A-Za-z]", m.group(1)):
            return None
        names.append(m.group(1))
        if m.group(2):
            units[m.group(1)] = m.group(2)
    return names, units


def parse_query_gpu_csv(text: str, fields: list[str] | None = None) -> QueryCsv:
    """Parse the csv; pass ``fields`` (from the probe's command line) for ``noheader`` output."""
    require_text(TOOL, text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        low = ln.lower()
        if "is not a valid field" in low or low.startswith(
            ("error", "failed", "nvidia-smi has failed")
        ):
            raise ParseError(TOOL, f"nvidia-smi reported an error: {ln.strip()[:120]}")
    table = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    head = _header(table[0])
    if head is not None:
        names, units = head
        data = table[1:]
    elif fields:
        names, units = list(fields), {}
        data = table
    else:
        raise ParseError(
            TOOL, "no header row and no field list", hint="pass the --query-gpu field list"
        )
    if not data:
        raise ParseError(TOOL, "header only, no GPU rows")
    rows = []
    for cells in data:
        if len(cells) != len(names):
            raise ParseError(TOOL, f"row has {len(cells)} values for {len(names)} fields")
        rows.append(CsvGpuRow({n: clean(v) for n, v in zip(names, cells, strict=True)}))
    return QueryCsv(fields=tuple(names), units=units, rows=tuple(rows))
