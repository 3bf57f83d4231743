"""The certification extent in words: what a run measured on a node, and each node whose
certificate is partial, with the gaps its policy does not accept and what to do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuboot.report.extent import (
    ACCEPT_VAR,
    FULL,
    GAP_FIX,
    NO_PAIR,
    NO_PROBES,
    QUICK_PROBES,
    UNPROVEN,
    Extent,
)

MEASURABLE = {NO_PROBES, QUICK_PROBES, NO_PAIR}  # gaps another certify run closes


def measured_text(m: Mapping[str, Any], *, partners: bool = True) -> str:
    """One line: probe level, repeats, DCGM level, GPUs, rails, pair partners (by name, or
    counted: ``partners`` False, so that nodes measured alike share a line)."""
    gpus, rails, pairs = m.get("gpus") or {}, m.get("rails") or {}, m.get("pairs") or {}
    done, every = rails.get("measured") or [], rails.get("profile") or []
    parts = [
        f"probes {m.get('probes') or 'not recorded'}",
        f"{m.get('repeats') or 0} repeat(s)",
        f"dcgmi diag -r {m['dcgm_diag_level']}" if m.get("dcgm_diag_level") else "no dcgmi diag",
        f"GPUs {gpus.get('measured') or 0}/{gpus.get('profile') or '?'}",
        f"rails {len(done)}/{len(every)}" + (f" ({', '.join(done)})" if done else ""),
    ]
    for kind in ("tcp_bw", "ib_write_bw"):
        peers = pairs.get(kind) or []
        named = ", ".join(peers) if partners else f"{len(peers)} partner(s)"
        parts.append(f"{kind} with {named if peers else 'no partner'}")
    return "; ".join(parts)


def measured_block(extents: Mapping[str, Extent]) -> str:
    """What the run measured, one line per set of nodes measured alike."""
    from gpuboot.ui import host_ranges

    alike: dict[str, list[str]] = {}
    for host, e in extents.items():
        alike.setdefault(measured_text(e.measured, partners=False), []).append(host)
    return "".join(f"\nmeasured on {host_ranges(h)}: {line}" for line, h in alike.items())


def certification_text(
    extents: Mapping[str, Extent], inventory: str, sign_key: str | None, hosts: Sequence[str]
) -> str:
    """A line per node certified in part: accepted by its policy, or PARTIAL (not
    certified) with its gaps, the command that measures what can be measured (with a
    partner: a node measured in full, else another of the inventory's ``hosts``), and the
    policy that would accept the rest."""
    lines = []
    full = [h for h, e in extents.items() if e.scope == FULL]
    others = [*full, *(h for h in hosts if h not in full)]
    for host, e in extents.items():
        if e.scope == FULL:
            continue
        gaps = "; ".join(f"{g.check} ({g.scope}): {g.reason}" for g in e.gaps)
        if e.certifies:
            lines.append(f"  {host}: partial, accepted by its {ACCEPT_VAR}: {gaps}")
            continue
        word = "PARTIAL, not certified" if sign_key else "partial (no --sign-key: none issued)"
        lines.append(f"  {host}: {word}: {gaps}")
        left = e.unaccepted
        said = f"its {ACCEPT_VAR} ({', '.join(e.accepts) or 'not set'}) does not accept"
        lines.append(f"    {said} {', '.join(left)}")
        if set(left) & MEASURABLE:
            partner = next((h for h in others if h != host), None) if NO_PAIR in left else None
            limit = f"{host},{partner}" if partner else host
            key = f" --sign-key {sign_key}" if sign_key else ""
            alone = NO_PAIR in left and not partner
            lines.append(
                f"    measure it: gpuboot certify -i {inventory} --limit {limit} --probes full{key}"
                + (" (a pair probe needs a partner: add a known-good node)" if alone else "")
            )
        for scope in left:
            if scope not in MEASURABLE:
                lines.append(f"    {scope}: {GAP_FIX[scope]}")
        acceptable = [s for s in left if s != UNPROVEN]
        if acceptable == list(left):
            names = ", ".join([*e.accepts, *acceptable])
            lines.append(
                f"    or accept it: {ACCEPT_VAR}: [{names}] in {host}'s host or group vars"
            )
    if not lines:
        return ""
    return (
        f"\ncertification: {len(full)} of {len(extents)} passing node(s) measured in full\n"
        + "\n".join(lines)
    )
