"""Pair probes across nodes (ib_write_bw over the fabric, TCP over the management network).

Nodes are paired in a ring (node i serves, node i+1 connects), run in rounds of disjoint
pairs so no node is in two probes at once. A pair that fails says only that one of its two
nodes is bad: both are re-tested, each with a known-good partner (``attribute``), before
the fault is pinned on the one that stays slow; the other is cleared, saying why. With no
known-good partner the fault cannot be pinned: both nodes get ERROR, neither is called
faulty nor certified.

A side that gives no answer within the controller's deadline (the runner raises
RemoteTimeout: a tool stuck in the kernel, a hostile node) is ERROR for the pair phase,
named with its deadline, and is not tried again: a re-test would only wait as long again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import ib_write_bw_file, tcp_bw_file
from gpuboot.errors import GpubootError
from gpuboot.evidence.perftest import parse_ib_write_bw
from gpuboot.probes import tcpbw
from gpuboot.remote import RemoteTimeout

# (host, shell command) -> output. Returns, or raises RemoteTimeout, within the host's
# deadline for a pair probe: the phase waits on it.
Runner = Callable[[str, str], ProbeOutput]
SERVER_HEAD_START_S = 0.5
# A side's deadline, kept by the controller: the tools' own `timeout 60` on the node, ssh
# set-up and margin. A host's `gpuboot_pair_timeout` overrides it.
PAIR_DEADLINE_S = 120
TOOL_TIMEOUT_S = 60  # the node's own `timeout` on a pair tool
TOOL_TIMEOUT_MIN_S = 5
SSH_MARGIN_S = 5  # of a side's deadline: ssh set-up and the answer's way back


def tool_timeout(*deadlines: float | None) -> int:
    """The node-side `timeout` of a pair's tools: within the shorter deadline of its two
    hosts, so a partner of a hung node stops waiting for it when the controller does,
    not a minute later."""
    known = [d - SSH_MARGIN_S for d in deadlines if d is not None]
    return int(max(TOOL_TIMEOUT_MIN_S, min([TOOL_TIMEOUT_S, *known])))


@dataclass(frozen=True)
class PairSpec:
    kind: str  # "ib_write_bw" or "tcp_bw"
    server_cmd: Callable[[int], str]  # the node's tool timeout -> command
    client_cmd: Callable[[str, int], str]  # peer address, tool timeout -> command
    file: Callable[[str], str]  # peer name -> evidence file name
    value: Callable[[ProbeOutput, ProbeOutput], float]  # (server, client) -> measured figure


@dataclass
class PairRun:
    kind: str
    server: str
    client: str
    ok: bool
    value: float | None
    reason: str
    outputs: dict[str, tuple[str, ProbeOutput]] = field(default_factory=dict)  # host -> file
    late: tuple[str, ...] = ()  # hosts that gave no answer within their deadline


def ib_spec(hca: str, seconds: int = 2) -> PairSpec:
    base = f"ib_write_bw -d {hca} --report_gbits -F -s 1048576 -D {seconds}"

    def value(_srv: ProbeOutput, cli: ProbeOutput) -> float:
        res = parse_ib_write_bw(cli.stdout)
        bws = [r.bw_average_gbits_s for r in res.runs if r.bw_average_gbits_s is not None]
        if res.errors or not bws:
            raise GpubootError(res.errors[0] if res.errors else "no bandwidth row")
        return max(bws)

    return PairSpec(
        "ib_write_bw",
        lambda limit: f"timeout {limit} {base}",
        lambda peer, limit: f"timeout {limit} {base} {peer}",
        lambda peer: ib_write_bw_file(hca, peer),
        value,
    )


def tcp_spec(seconds: float = 1.0) -> PairSpec:
    return PairSpec(
        "tcp_bw",
        lambda limit: tcpbw.server_command(limit=limit),
        lambda peer, limit: tcpbw.client_command(peer, seconds, limit=limit),
        tcp_bw_file,
        lambda srv, _cli: tcpbw.parse_tcpbw(srv.stdout).gbits_s,
    )


def ring_rounds(hosts: list[str]) -> list[list[tuple[str, str]]]:
    """(server, client) pairs of a ring, grouped into rounds of node-disjoint pairs."""
    n = len(hosts)
    if n < 2:
        return []
    pairs = [(hosts[0], hosts[1])] if n == 2 else [(hosts[i], hosts[(i + 1) % n]) for i in range(n)]
    rounds: list[list[tuple[str, str]]] = []
    while pairs:
        used: set[str] = set()
        this, rest = [], []
        for a, b in pairs:
            if a in used or b in used:
                rest.append((a, b))
            else:
                this.append((a, b))
                used |= {a, b}
        rounds.append(this)
        pairs = rest
    return rounds


# A side as measured: its output, and whether it passed its deadline (the output says so).
Side = tuple[ProbeOutput, bool]
# One round's node-disjoint pairs at once: [(server, client, server command, client
# command)] -> each pair's (server side, client side), in order. Each server is started,
# and given its head start, before its client.
RoundRunner = Callable[[list[tuple[str, str, str, str]]], list[tuple[Side, Side]]]


def direct_rounds(run: Runner) -> RoundRunner:
    """A round run side by side through ``run``: each pair on a thread of its own."""

    def play(commands: list[tuple[str, str, str, str]]) -> list[tuple[Side, Side]]:
        with ThreadPoolExecutor(max_workers=max(1, len(commands))) as pool:
            return list(pool.map(lambda c: _sides(run, *c), commands))

    return play


def _sides(run: Runner, server: str, client: str, srv_cmd: str, cli_cmd: str) -> tuple[Side, Side]:
    box: dict[str, Side] = {}
    t = threading.Thread(target=lambda: box.setdefault("s", _side(run, server, srv_cmd)))
    t.start()
    time.sleep(SERVER_HEAD_START_S)
    cli = _side(run, client, cli_cmd)
    t.join()  # the runner returns within the server's deadline
    # a runner that raised on the server side said nothing: the pair failed, nobody late
    return box.get("s", (ProbeOutput("", "server side did not finish", 124), False)), cli


def run_round(
    spec: PairSpec,
    pairs: list[tuple[str, str]],
    addresses: dict[str, str],
    play: RoundRunner,
    fail_below: float,
    suffix: str = "",
    limits: dict[tuple[str, str], int] | None = None,
) -> list[PairRun]:
    """One measurement per (server, client) of a round, all at once through ``play``;
    ``limits``: a pair's node-side timeout of both tools (tool_timeout)."""
    commands = []
    for server, client in pairs:
        limit = (limits or {}).get((server, client), TOOL_TIMEOUT_S)
        peer = addresses.get(server, server)
        commands.append((server, client, spec.server_cmd(limit), spec.client_cmd(peer, limit)))
    sides = play(commands)
    return [
        _judged(spec, server, client, srv, cli, fail_below, suffix)
        for (server, client), (srv, cli) in zip(pairs, sides, strict=True)
    ]


def run_pair(
    spec: PairSpec,
    server: str,
    client: str,
    addresses: dict[str, str],
    run: Runner,
    fail_below: float,
    suffix: str = "",
    limit: int = TOOL_TIMEOUT_S,
) -> PairRun:
    """One measurement between ``server`` and ``client``; ``limit`` is the node-side
    timeout of both tools (tool_timeout)."""
    limits = {(server, client): limit}
    pair = [(server, client)]
    return run_round(spec, pair, addresses, direct_rounds(run), fail_below, suffix, limits)[0]


def _judged(
    spec: PairSpec,
    server: str,
    client: str,
    server_side: Side,
    client_side: Side,
    fail_below: float,
    suffix: str,
) -> PairRun:
    """The pair's run from its two sides' outputs."""
    (srv, srv_late), (cli, cli_late) = server_side, client_side
    name = lambda peer: spec.file(peer).replace(".txt", f"{suffix}.txt")  # noqa: E731
    outputs = {server: (name(client), srv), client: (name(server), cli)}
    late = tuple(h for h, was in ((server, srv_late), (client, cli_late)) if was)
    if late:
        side, out = (server, srv) if srv_late else (client, cli)
        return PairRun(
            spec.kind, server, client, False, None, f"{side}: {out.stderr}", outputs, late
        )
    if srv.rc != 0 or cli.rc != 0:
        side, out = (server, srv) if srv.rc != 0 else (client, cli)
        text = (out.stderr.strip() or out.stdout.strip() or f"exit {out.rc}").splitlines()[-1]
        return PairRun(spec.kind, server, client, False, None, f"{side}: {text}", outputs)
    try:
        value = spec.value(srv, cli)
    except GpubootError as exc:
        return PairRun(spec.kind, server, client, False, None, f"unreadable: {exc}", outputs)
    ok = value >= fail_below
    why = "ok" if ok else f"{value:g} below the fail threshold {fail_below:g}"
    return PairRun(spec.kind, server, client, ok, value, why, outputs)


def _side(run: Runner, host: str, command: str) -> Side:
    """One side's output, and whether it passed its deadline (the output then says so)."""
    try:
        return run(host, command), False
    except RemoteTimeout as exc:
        return ProbeOutput("", exc.message, 124), True


def _late_reason(r: PairRun, host: str) -> str:
    return f"{r.kind} {r.server}->{r.client}: {host}: {r.outputs[host][1].stderr}"


def _candidates(h: str, pair: set[str], good: set[str]) -> list[str]:
    """Known-good partners for ``h``: measured within band with some node this run, outside
    the failed pair."""
    return sorted(good - pair - {h})


def attribute(
    hosts: list[str], runs: list[PairRun], retry: Callable[[str, str], PairRun]
) -> tuple[dict[str, dict[str, Any]], list[PairRun]]:
    """Per host: status good | pinned | unattributed | none, with the runs behind it.

    The second pass (as in Google's cluster-health-scanner): a pair below its band says only
    that one of its two nodes is slow, so BOTH members are re-tested, each with a known-good
    partner of this run (a node measured within band with someone) other than the failed
    pair's, a different one for each member where the run has two. The member that stays
    slow is pinned; the member that is fine with its known-good partner is cleared, and its
    verdict says which pair failed and which re-test cleared it. With no known-good partner
    the same pair is tried once more; failing again, nobody can be blamed (unattributed).
    A host past its deadline in any run is unattributed (ERROR), saying so, never re-tested
    nor used as a known-good partner."""
    late: dict[str, list[str]] = {}
    for r in runs:
        for h in r.late:
            late.setdefault(h, []).append(_late_reason(r, h))
    good = {h for r in runs if r.ok for h in (r.server, r.client)} - set(late)
    bad_with: dict[str, set[str]] = {}
    for r in runs:
        if not r.ok:
            bad_with.setdefault(r.server, set()).add(r.client)
            bad_with.setdefault(r.client, set()).add(r.server)
    strict = good - set(bad_with)  # every run of theirs was ok
    involved = {h for r in runs for h in (r.server, r.client)}
    retries: list[PairRun] = []
    done: dict[frozenset[str], PairRun] = {}  # one re-test per pair of nodes

    def again(server: str, client: str) -> PairRun:
        key = frozenset((server, client))
        if key not in done:
            done[key] = retry(server, client)
            retries.append(done[key])
        return done[key]

    cleared: dict[str, list[str]] = {}
    pinned: dict[str, list[str]] = {}
    unattributed: dict[str, list[str]] = {}
    for r in runs:
        if r.ok:
            continue
        failed = f"{r.server}->{r.client}: {r.reason}"
        pair = {r.server, r.client}
        members = [(r.server, r.client), (r.client, r.server)]
        cands = {h: _candidates(h, pair, good) for h, _ in members}
        fresh = {h: [c for c in cands[h] if c not in bad_with.get(h, set())] for h, _ in members}
        used: set[str] = set()
        # the member with fewer fresh partners chooses first: each gets its own
        for h, other in sorted(members, key=lambda m: (len(fresh[m[0]]), len(cands[m[0]]))):
            if h in late:  # its own deadline decides its verdict
                continue
            if h in pinned:  # already slow with a known-good partner: nothing more to learn
                continue
            if h in cleared:  # already fine with a known-good partner: the other one is slow
                cleared[h].append(f"pair with {other} below its band ({failed})")
                continue
            # one h has not failed with yet (else the re-test repeats a failed pair: only a
            # confirmation), then one the other member is not using, every run of it ok first
            seen = bad_with.get(h, set())
            g = min(
                cands[h], key=lambda c: (c in seen, c in used, c not in strict, c), default=None
            )
            if g is None and other in late:
                unattributed.setdefault(h, []).append(
                    f"pair failed ({failed}) and no known-good partner to retry with"
                )
                continue
            if g is None:
                second = again(r.server, r.client)
                if second.ok:
                    cleared.setdefault(h, []).append(f"pair {failed}; ok on a second try")
                else:
                    unattributed.setdefault(h, []).append(
                        f"pair failed ({failed}) and no known-good partner to retry with"
                    )
                continue
            used.add(g)
            test = again(g, h)
            if h in test.late:
                late.setdefault(h, []).append(_late_reason(test, h))
                continue
            if test.ok:
                cleared.setdefault(h, []).append(
                    f"cleared: pair with {other} below its band ({failed}); "
                    f"retry with known-good {g} ok ({test.value:g})"
                )
            else:
                pinned.setdefault(h, []).append(
                    f"failed ({failed}); retry with known-good {g}: {test.reason}"
                )
    verdict: dict[str, dict[str, Any]] = {}
    for h in hosts:
        if h not in involved:
            verdict[h] = {"status": "none", "reason": "no partner node in this run"}
        elif h in late:
            verdict[h] = {"status": "unattributed", "reason": "; ".join(late[h])}
        elif h in pinned:
            verdict[h] = {"status": "pinned", "reason": "; ".join(pinned[h])}
        elif h in unattributed:
            verdict[h] = {"status": "unattributed", "reason": "; ".join(unattributed[h])}
        else:
            verdict[h] = {"status": "good", "reason": "; ".join(cleared.get(h, [])) or "ok"}
    for h, v in verdict.items():
        v["runs"] = [
            {"server": r.server, "client": r.client, "ok": r.ok, "value": r.value}
            | {"reason": r.reason}
            for r in [*runs, *retries]
            if h in (r.server, r.client)
        ]
    return verdict, retries


_WORST_FIRST = ("pinned", "unattributed", "good", "none")


def combine_rails(verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One host's verdict over its rails ("" for a single-path probe): the worst rail's
    status, the reasons of every rail with that status, every run tagged with its rail."""
    if list(verdicts) == [""]:
        return verdicts[""]
    status = min((v["status"] for v in verdicts.values()), key=_WORST_FIRST.index)
    reasons = [
        f"{rail}: {v['reason']}"
        for rail, v in verdicts.items()
        if v["status"] == status and v["reason"] != "ok"
    ]
    runs = [{**r, "rail": rail} for rail, v in verdicts.items() for r in v.get("runs", [])]
    return {"status": status, "reason": "; ".join(reasons) or "ok", "runs": runs}
