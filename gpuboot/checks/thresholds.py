"""Bands for measured figures: expected value, warn/fail thresholds and the physical limit.

Resolution order for one figure (later wins):
  1. the profile's ``bandwidth:`` section - what a healthy node of the SKU measures - times
     its ``warn_below``/``fail_below`` fractions;
  2. the profile's ``thresholds.<figure>`` (physical limit, its source, absolute bands);
  3. the host's ``gpuboot_thresholds`` (group/host vars): ``{warn_below: 0.85}`` fractions
     for every figure, or ``{<figure>: {expected|warn_below|fail_below: number}}`` absolute.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Any

from gpuboot.checks.base import FAIL, PASS, WARN

# figure -> (unit, path of the healthy figure under the profile's `bandwidth:`)
FIGURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvbandwidth_h2d": ("GB/s", ("nvbandwidth", "h2d_gbps")),
    "nvbandwidth_d2h": ("GB/s", ("nvbandwidth", "d2h_gbps")),
    "nvbandwidth_d2d": ("GB/s", ("nvbandwidth", "d2d_gbps")),
    "all_reduce_busbw": ("GB/s", ("all_reduce_busbw_gbps",)),
    "ib_write_bw": ("Gb/s", ("ib_write_bw_gbps",)),
    "tcp_bw": ("Gb/s", ()),
}
# Management-network TCP has no SKU figure: a sanity floor unless the operator sets one.
TCP_DEFAULT = {"expected": 1.0, "warn_below": 0.5, "fail_below": 0.1}


@dataclass(frozen=True)
class Band:
    figure: str
    unit: str
    expected: float | None
    warn_below: float
    fail_below: float
    physical_limit: float | None
    source: str | None

    def status(self, value: float) -> str:
        if value < self.fail_below:
            return FAIL
        if value < self.warn_below:
            return WARN
        return PASS


def _dig(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def band(figure: str, profile: dict[str, Any], hostvars: dict[str, Any]) -> Band | None:
    """The band for ``figure`` on this node, or None when the SKU has no such figure."""
    unit, path = FIGURES[figure]
    bw = profile.get("bandwidth", {})
    over = hostvars.get("gpuboot_thresholds") or {}
    warn_f = float(over.get("warn_below", bw.get("warn_below", 0.9)))
    fail_f = float(over.get("fail_below", bw.get("fail_below", 0.8)))
    spec = dict((profile.get("thresholds") or {}).get(figure) or {})
    if figure == "tcp_bw":
        spec = {**TCP_DEFAULT, **spec}
    expected = spec.get("expected", _dig(bw, path) if path else None)
    if expected is None and "fail_below" not in spec:
        return None
    spec.update(over.get(figure) or {})
    expected = spec.get("expected", expected)
    exp = float(expected) if expected is not None else None
    warn = spec.get("warn_below", exp * warn_f if exp is not None else None)
    fail = spec.get("fail_below", exp * fail_f if exp is not None else None)
    if fail is None or warn is None:
        return None
    limit = spec.get("physical_limit")
    return Band(
        figure,
        unit,
        exp,
        float(warn),
        float(fail),
        float(limit) if limit is not None else None,
        spec.get("source"),
    )


def measurement(name: str, samples: list[float], b: Band) -> dict[str, Any]:
    """The report's record of one figure: median of the runs, band, margin, % of the limit."""
    value = round(median(samples), 2)
    pct = round(100.0 * value / b.physical_limit, 1) if b.physical_limit else None
    return {
        "name": name,
        "value": value,
        "unit": b.unit,
        "median_of": len(samples),
        "samples": [round(s, 2) for s in samples],
        "expected": b.expected,
        "warn_below": round(b.warn_below, 2),
        "fail_below": round(b.fail_below, 2),
        "physical_limit": b.physical_limit,
        "physical_limit_source": b.source,
        "pct_of_limit": pct,
        # distance to the fail threshold, in the figure's unit: negative = failing
        "margin": round(value - b.fail_below, 2),
        "status": b.status(value),
    }
