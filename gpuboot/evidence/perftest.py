"""perftest ``ib_write_bw`` (and the other ``ib_*_bw``) client/server output.

Bandwidth is normalised to Gb/s (gigabits/s). perftest prints MB/sec unless run with
``--report_gbits``; its MB is read as 10^6 bytes (decimal, like its Gb: 1 MB/sec = 0.008
Gb/sec), not as a MiB, and the unit seen is kept in ``reported_unit``. Server and
client output may be concatenated in one file: each "BW Test" block is one ``PerftestRun``.
A run that failed to connect has ``errors`` and no rows: a failure, never a zero. A run that
aborted part way (a completion error, "Failed to complete run_iter_bw") printed rows for the
sizes before it: ``aborted`` names the abort, and those rows are not a measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "ib_write_bw"

MB_PER_S_TO_GBIT_S = 1e6 * 8 / 1e9  # MB = 10^6 bytes, Gb = 10^9 bits

_TITLE = re.compile(r"^\s*(\S.*?BW Test)\s*$")
_COLS = re.compile(r"#bytes\s+#iterations\s+BW peak\[(\S+)\]\s+BW average\[(\S+)\]", re.I)
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_KV = re.compile(r"([A-Za-z][\w* .-]*?)\s*:\s*(\S+)")
_ERROR = re.compile(
    r"(unable to|couldn't|could not|failed|unexpected cm event|error|"
    r"no such device|not found|conflicting)",
    re.I,
)


@dataclass(frozen=True)
class BwRow:
    size_bytes: int
    iterations: int
    bw_peak_gbits_s: float
    bw_average_gbits_s: float
    msg_rate_mpps: float


@dataclass(frozen=True)
class PerftestRun:
    test: str  # "RDMA_Write BW Test"
    settings: dict[str, str]  # "Device", "Number of qps", "Link type", "Mtu", ...
    reported_unit: str | None  # "Gb/sec" or "MB/sec" as printed
    rows: tuple[BwRow, ...]

    @property
    def device(self) -> str | None:
        return self.settings.get("Device")

    @property
    def mtu_bytes(self) -> int | None:
        m = re.match(r"(\d+)", self.settings.get("Mtu", ""))
        return int(m.group(1)) if m else None

    @property
    def qps(self) -> int | None:
        v = self.settings.get("Number of qps")
        return int(v) if v and v.isdigit() else None

    @property
    def bw_average_gbits_s(self) -> float | None:
        """Best average over the sizes run (the plateau of a -a sweep)."""
        return max((r.bw_average_gbits_s for r in self.rows), default=None)


@dataclass(frozen=True)
class PerftestResult:
    runs: tuple[PerftestRun, ...]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    aborted: str | None = None  # the first error printed after a bandwidth row

    @property
    def failed(self) -> bool:
        """No bandwidth table at all and the tool said why: a failed run, not 0 Gb/s."""
        return not any(r.rows for r in self.runs)

    @property
    def bw_average_gbits_s(self) -> float | None:
        return max((r.bw_average_gbits_s for r in self.runs if r.rows), default=None)


def _to_gbits(value: float, unit: str | None) -> float:
    if unit and unit.lower().startswith("mb"):
        return value * MB_PER_S_TO_GBIT_S
    if unit and unit.lower().startswith("gb"):
        return value
    raise ParseError(TOOL, f"unknown bandwidth unit {unit!r}")


def parse_ib_write_bw(text: str) -> PerftestResult:
    require_text(TOOL, text)
    runs: list[dict] = []
    errors: list[str] = []
    warnings: list[str] = []
    aborted: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or set(line) <= {"-", "*"}:
            continue
        if (m := _TITLE.match(line)) and "test" in line.lower() and ":" not in line:
            runs.append({"test": m.group(1), "settings": {}, "unit": None, "rows": []})
            continue
        if m := _COLS.search(line):
            if not runs:
                runs.append({"test": "BW Test", "settings": {}, "unit": None, "rows": []})
            runs[-1]["unit"] = m.group(2)
            continue
        if (m := _ROW.match(line)) and runs and runs[-1]["unit"]:
            unit = runs[-1]["unit"]
            runs[-1]["rows"].append(
                BwRow(
                    int(m.group(1)),
                    int(m.group(2)),
                    _to_gbits(float(m.group(3)), unit),
                    _to_gbits(float(m.group(4)), unit),
                    float(m.group(5)),
                )
            )
            continue
        low = line.lower()
        if (
            runs
            and not runs[-1]["rows"]
            and not runs[-1]["unit"]
            and ":" in line
            and not low.startswith(("local address", "remote address", "gid"))
        ):
            # settings block: "Dual-port : OFF<TAB><TAB>Device : mlx5_1" pairs
            for part in re.split(r"\t+", raw):
                if ":" in part:
                    k, v = part.split(":", 1)
                    runs[-1]["settings"][k.strip()] = v.strip()
            continue
        if (
            low.startswith(("warning", "requested mtu", "changing to active mtu"))
            or "inline size set to" in low
        ):
            warnings.append(line)
        elif _ERROR.search(line) and "GPU buffer" not in line:
            errors.append(line)
            if aborted is None and any(r["rows"] for r in runs):
                aborted = line
    result = PerftestResult(
        runs=tuple(
            PerftestRun(r["test"], r["settings"], r["unit"], tuple(r["rows"])) for r in runs
        ),
        errors=tuple(errors),
        warnings=tuple(warnings),
        aborted=aborted,
    )
    if result.failed and not errors:
        raise ParseError(
            TOOL,
            "no bandwidth table and no error message",
            hint="output truncated? re-run the probe",
        )
    return result
