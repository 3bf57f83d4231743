"""RoCE rail rules read from `show_gids` (NIC-004) and `ethtool -S` (NIC-005).

A RoCE v2 GID on each rail: NCCL and perftest address a RoCE peer by a GID of the version the
fabric routes (v2: UDP/IP); a rail with none (no IP on the netdev, GID table not populated)
cannot carry RDMA traffic whatever its port state. The counters are recorded for the scan
history, which computes their growth (gpuboot/trends.py); a count alone proves nothing.
"""

from __future__ import annotations

import re

from gpuboot.bundle.model import Evidence
from gpuboot.bundle.names import GIDS_FILE
from gpuboot.checks.base import (
    PASS,
    NodeContext,
    ProbeFailed,
    Result,
    forms_in,
    not_applicable,
    parsed,
    tool_failure,
)
from gpuboot.checks.fabric_rules import roce_rails
from gpuboot.checks.smi import seen_or_unread
from gpuboot.errors import ParseError
from gpuboot.evidence.forms import parser_of


def check_roce_gids(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Every RoCE rail of the profile has a RoCE v2 GID (matched by RDMA device or netdev).
    A table without show_gids' n_gids_found trailer was cut: a rail it shows without a v2
    GID fails, a rail it does not show is not read (ERROR)."""
    rails = roce_rails(ctx)
    if isinstance(rails, Result):
        return rails
    found = forms_in(evidence, "gids")
    if not found:  # gpuboot's collection does not run show_gids: judged where handed in
        return not_applicable(f"no {GIDS_FILE}: the rails' GID tables were not read")
    name, form, out = found[0]
    if why := tool_failure("show_gids", out):
        raise ProbeFailed(why, where=name)
    try:
        table = parsed(parser_of("gids", form), out.stdout)
    except ParseError as exc:
        raise ProbeFailed(exc.message, where=name) from None
    problems, unread = [], []
    for nic in rails:
        mine = [g for g in table.gids if g.device == nic["hca"] or g.netdev == nic["netdev"]]
        if not mine and not table.complete:
            unread.append(nic["netdev"])
        elif not any(g.version == "v2" for g in mine):
            have = ", ".join(sorted({g.version for g in mine})) or "none"
            problems.append(f"{nic['netdev']} ({nic['hca']}): no RoCE v2 GID (GIDs: {have})")
    gap = f"{name} is cut (no n_gids_found) before {', '.join(unread)}" if unread else None
    out_ = seen_or_unread(problems, gap, name)
    if out_ is None:
        return Result(PASS, f"a RoCE v2 GID on each of the {len(rails)} RoCE rail(s)")
    return out_


# canonical counter -> (unit, the driver's names: first present wins, or a regex summed)
COUNTERS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "rx_pause_frames": ("frames", ("rx_pause_ctrl_phy",), r"rx_prio\d_pause"),
    "tx_pause_frames": ("frames", ("tx_pause_ctrl_phy",), r"tx_prio\d_pause"),
    "rx_out_of_buffer": ("packets", ("rx_out_of_buffer", "out_of_buffer"), None),
    "np_ecn_marked_roce_packets": ("packets", ("np_ecn_marked_roce_packets",), None),
    "np_cnp_sent": ("packets", ("np_cnp_sent",), None),
    "rp_cnp_handled": ("packets", ("rp_cnp_handled",), None),
}
_IFACE = re.compile(r"^ethtool_-S_([^_.]+)")


def roce_counters(iface: str, counters: dict[str, int]) -> list[dict]:
    """The RoCE counters an `ethtool -S` shows, as node-report measurements (the shape agreed
    with the scan history's trends): a counter the driver does not print is absent."""
    out = []
    for counter, (unit, names, summed) in COUNTERS.items():
        name = next((n for n in names if n in counters), None)
        if name is not None:
            value, source = counters[name], name
        elif summed and (parts := sorted(n for n in counters if re.fullmatch(summed, n))):
            value, source = sum(counters[n] for n in parts), "+".join(parts)
        else:
            continue
        out.append(
            {
                "kind": "counter",
                "name": f"roce.{iface}.{counter}",
                "device": iface,
                "counter": counter,
                "value": value,
                "unit": unit,
                "source": source,
            }
        )
    return out


def check_roce_counters(evidence: Evidence, ctx: NodeContext) -> Result:
    """Record each rail's RoCE counters (pause, out-of-buffer, ECN/CNP) from its `ethtool -S`
    for the scan history; PASS when every file reads, not judged when none was handed in."""
    found = forms_in(evidence, "ethtool_stats")
    if not found:
        return not_applicable("no ethtool -S output: the RoCE counters are not recorded")
    measurements = []
    for name, form, out in found:
        if why := tool_failure("ethtool -S", out):
            raise ProbeFailed(why, where=name)
        m = _IFACE.match(name)
        try:
            stats = parsed(parser_of("ethtool_stats", form), out.stdout)
        except ParseError as exc:
            raise ProbeFailed(exc.message, where=name) from None
        measurements += roce_counters(m.group(1) if m else name, stats.counters)
    ifaces = sorted({m["device"] for m in measurements})
    text = (
        f"{len(measurements)} RoCE counter(s) recorded on {', '.join(ifaces)}"
        if measurements
        else f"no RoCE counter among the {len(found)} ethtool -S file(s) read"
    )
    return Result(PASS, text, measurements=measurements)
