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


def run_pair_probes(entries: dict[str, dict[str, Any]], run: pairs.Runner) -> None:
    """Mutates each entry: evidence gets the pair files, meta gets ``pairs``."""
    for kind in ("tcp_bw", "ib_write_bw"):
        hosts = _eligible(entries, kind)
        if not hosts:
            continue
        first = entries[hosts[0]]
        if kind == "tcp_bw":
            spec = pairs.tcp_spec(TCP_SECONDS.get(first["meta"]["probes"], 1.0))
        else:
            spec = pairs.ib_spec(first["profile"]["hardware"]["nics"][0]["hca"])
        b = band(kind, first["profile"], first["hostvars"])
        fail_below = b.fail_below if b else 0.0
        addresses = {h: _address(entries[h], h) for h in hosts}

        def one(pair: tuple[str, str], suffix: str = "", spec=spec, fb=fail_below, ad=addresses):
            return pairs.run_pair(spec, pair[0], pair[1], ad, run, fb, suffix)

        runs: list[pairs.PairRun] = []
        for rnd in pairs.ring_rounds(hosts):
            with ThreadPoolExecutor(max_workers=max(1, len(rnd))) as pool:
                runs += list(pool.map(one, rnd))
        verdicts, retries = pairs.attribute(hosts, runs, lambda s, c: one((s, c), ".retry"))
        for r in [*runs, *retries]:
            for host, (file, out) in r.outputs.items():
                entries[host]["evidence"][file] = out
        for host, v in verdicts.items():
            entries[host]["meta"].setdefault("pairs", {})[kind] = {host: v}
