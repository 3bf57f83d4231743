"""The pair-probe phase of a certify run: after every node's evidence is in, pair the
nodes (ib_write_bw over the fabric, TCP over the management network), attribute failures
and add the raw outputs and the attribution to each node's evidence and meta."""

from __future__ import annotations

from typing import Any

from gpuboot.checks.thresholds import band
from gpuboot.probes import pairs

TCP_SECONDS = {"quick": 1.0, "full": 3.0}


def _eligible(entries: dict[str, dict], kind: str) -> list[str]:
    out = []
    for name, e in sorted(entries.items()):
        if e["meta"].get("probes", "none") == "none" or e["profile"] is None:
            continue
        if kind == "ib_write_bw" and not (
            e["profile"]["hardware"]["nics"] and e["hostvars"].get("doca_ofed_enabled")
        ):
            continue
        out.append(name)
    return out


def _address(entry: dict, name: str) -> str:
    return str(entry["hostvars"].get("ansible_host", name))


def _rails(entry: dict) -> list[str]:
    """The HCAs ib_write_bw measures: every rail at the full level, the first one else
    (rails are wired rail to rail, so rail i of one node meets rail i of its partner)."""
    hcas = [n["hca"] for n in entry["profile"]["hardware"]["nics"]]
    return hcas if entry["meta"].get("probes") == "full" else hcas[:1]


def run_pair_probes(
    entries: dict[str, dict[str, Any]],
    run: pairs.Runner | None = None,
    deadlines: dict[str, float] | None = None,
    *,
    play: pairs.RoundRunner | None = None,
) -> None:
    """Mutates each entry: evidence gets the pair files, meta gets ``pairs``. Each round
    runs through ``play`` (an executor's job), else side by side through ``run``.
    ``deadlines`` (host -> seconds, the runner's) bound each pair's node-side tool timeout."""
    known = deadlines or {}
    if play is None:
        if run is None:
            raise ValueError("a runner or a round runner")
        play = pairs.direct_rounds(run)
    for kind in ("tcp_bw", "ib_write_bw"):
        hosts = _eligible(entries, kind)
        if not hosts:
            continue
        first = entries[hosts[0]]
        if kind == "tcp_bw":
            specs = {"": pairs.tcp_spec(TCP_SECONDS.get(first["meta"]["probes"], 1.0))}
        else:
            specs = {hca: pairs.ib_spec(hca) for hca in _rails(first)}
        b = band(kind, first["profile"], first["hostvars"])
        fail_below = b.fail_below if b else 0.0
        addresses = {h: _address(entries[h], h) for h in hosts}
        per_rail = {}
        # One rail after the other: a rail's figure is its own, not a share of the node's.
        for rail, spec in specs.items():

            def measure(rnd, suffix="", spec=spec, ad=addresses, fb=fail_below):
                limits = {p: pairs.tool_timeout(*(known.get(h) for h in p)) for p in rnd}
                return pairs.run_round(spec, rnd, ad, play, fb, suffix, limits)

            runs = [r for rnd in pairs.ring_rounds(hosts) for r in measure(rnd)]
            verdicts, retries = pairs.attribute(
                hosts, runs, lambda s, c, f=measure: f([(s, c)], ".retry")[0]
            )
            for r in [*runs, *retries]:
                for host, (file, out) in r.outputs.items():
                    entries[host]["evidence"][file] = out
            per_rail[rail] = verdicts
        for host in hosts:
            verdict = pairs.combine_rails({rail: v[host] for rail, v in per_rail.items()})
            entries[host]["meta"].setdefault("pairs", {})[kind] = {host: verdict}
