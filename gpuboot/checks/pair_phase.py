"""The pair-probe phase of a certify run: after every node's evidence is in, pair the
nodes (ib_write_bw over the fabric, TCP over the management network), attribute failures
and add the raw outputs and the attribution to each node's evidence and meta."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
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
    run: pairs.Runner,
    deadlines: dict[str, float] | None = None,
) -> None:
    """Mutates each entry: evidence gets the pair files, meta gets ``pairs``. ``deadlines``
    (host -> seconds, the runner's) bound each pair's node-side tool timeout."""
    known = deadlines or {}
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

            def one(pair: tuple[str, str], suffix="", spec=spec, ad=addresses, fb=fail_below):
                limit = pairs.tool_timeout(*(known.get(h) for h in pair))
                return pairs.run_pair(spec, pair[0], pair[1], ad, run, fb, suffix, limit)

            runs: list[pairs.PairRun] = []
            for rnd in pairs.ring_rounds(hosts):
                with ThreadPoolExecutor(max_workers=max(1, len(rnd))) as pool:
                    runs += list(pool.map(one, rnd))
            verdicts, retries = pairs.attribute(
                hosts, runs, lambda s, c, f=one: f((s, c), ".retry")
            )
            for r in [*runs, *retries]:
                for host, (file, out) in r.outputs.items():
                    entries[host]["evidence"][file] = out
            per_rail[rail] = verdicts
        for host in hosts:
            verdict = pairs.combine_rails({rail: v[host] for rail, v in per_rail.items()})
            entries[host]["meta"].setdefault("pairs", {})[kind] = {host: verdict}
