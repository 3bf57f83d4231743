"""certify's engine, plain Python (no pytest): the inventory loaded and checked once ->
a transport per node -> each node's evidence, in parallel, kept per host -> the pair
phase -> the bundle -> the rules -> a typed report.

One broken node never stops the others: whatever keeps a node from being judged (ssh
failed, a hostile answer, its deadline passed, its evidence could not be kept) makes
that node ERROR with one short reason, and the others are judged as usual.

Every phase that waits on a node or its data has a controller-side deadline, per host
(inventory variables, seconds): collection (``gpuboot_collect_timeout``, default its
probes' timeouts end to end + 60 s), each side of a pair probe (``gpuboot_pair_timeout``,
default 120 s) and judging (``gpuboot_judge_timeout``, default 120 s: each node's rules
run in a worker process that is ended at its deadline).
"""

from __future__ import annotations

import functools
import resource
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuboot import judging, paths
from gpuboot.bundle.manifest import write_manifest
from gpuboot.bundle.model import Evidence, ProbeOutput
from gpuboot.bundle.store import bundle_host_dir, write_host_bundle
from gpuboot.checks import rules
from gpuboot.checks.pair_phase import run_pair_probes
from gpuboot.errors import GpubootError, RunError
from gpuboot.executor.collect_fleet import (
    CONTROLLER,
    Shard,
    collect_shards,
    in_background,
    plan_shards,
)
from gpuboot.executor.collect_job import ExecutorLost
from gpuboot.executor.pair_job import pair_shards
from gpuboot.inventory import Inventory, load_inventory, select_hosts
from gpuboot.node_collect import (
    HostUnreachable,
    NodeEvidence,
    check_deadlines,
    collect_node,
    host_deadline,
)
from gpuboot.probes.pairs import PAIR_DEADLINE_S
from gpuboot.progress import phases, sort_hosts
from gpuboot.remote import RemoteTimeout, run_with_deadline
from gpuboot.results import NodeReport, RunReport
from gpuboot.runner import failure_reason
from gpuboot.verdict import UNKNOWN

MAX_PARALLEL = 32
# A node's rules take well under a second; a hostile answer (a parser's worst case on
# 256 MiB) must not hold every other node's verdict.
JUDGE_DEADLINE_S = 120
UNJUDGED_ACTION = "fix the harness or reach the node, then certify again"
# What to do about a node whose executor was lost (verdict UNKNOWN)
LOST_ACTION = "reach the executor (gpuboot executor setup), then run again for these nodes"

# (inventory host, its checked variables) -> an object with testinfra's run(command)
Transport = Callable[[str, dict[str, Any]], Any]
Outcome = NodeEvidence | Exception  # a node's evidence, or why there is none


def node_report(host: str, findings: list[rules.Finding]) -> NodeReport:
    """One node as the rules judged it (certify's and evaluate's)."""
    findings = list(findings)
    return NodeReport.judged(host, findings, rules.verdict(findings))


def unjudged(host: str, exc: BaseException) -> NodeReport:
    """Every rule ERROR with one short reason: the harness could not judge the node (its
    27 findings each carry the reason, so never the whole collection script)."""
    reason = f"cannot judge: {failure_reason(exc)}"
    return node_report(
        host,
        [
            rules.Finding(r.id, r.title, rules.ERROR, reason, UNJUDGED_ACTION, r.severity)
            for r in rules.RULES
        ],
    )


def _parallel(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``fn`` over ``items`` on up to MAX_PARALLEL threads. On Ctrl-C nothing queued
    starts and the interrupt is not held up by calls still waiting on a node."""
    pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(1, len(items))))
    try:
        results = list(pool.map(fn, items))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def _pair_runner(hosts: Mapping[str, Any], deadlines: Mapping[str, float]):
    def run(name: str, command: str) -> ProbeOutput:
        try:
            out = run_with_deadline(hosts[name], command, deadlines[name], "pair probe")
        except RemoteTimeout:  # the pair phase makes that side ERROR, naming the deadline
            raise
        except Exception as exc:  # an SSH failure is the pair's failure, not the run's
            return ProbeOutput("", str(exc), 255)
        return ProbeOutput(out.stdout, out.stderr, out.rc)

    return run


def collect_nodes(
    targets: Mapping[str, tuple[Any, dict[str, Any]]],
    level: str | None = None,
    progress: Any = None,  # gpuboot.progress.RunProgress: told each node's start and end
    shards: Mapping[str, Shard] | None = None,
    run_dir: Path | None = None,
    on_detach: str = "finish",
) -> dict[str, Outcome]:
    """Every node's evidence (``targets``: name -> (transport host, variables)), one round
    trip per node in parallel, and at once the hosts of each executor's ``shards`` as one
    job per executor (journaled under ``run_dir``); then the pair probes among the nodes
    the controller reached, and among each domain's nodes on its executor. A node's
    exception is kept as its outcome; KeyboardInterrupt ends the run."""
    steps = phases(progress)
    shards = shards or {}

    def finished(name: str, outcome: Outcome) -> None:
        if isinstance(outcome, Exception):
            steps.finished_host(name, f"not judged: {failure_reason(outcome)}")
        else:
            steps.finished_host(name)

    def attempt(name: str) -> Outcome:
        host, hostvars = targets[name]
        steps.started_host(name)
        try:
            found: Outcome = collect_node(name, host, hostvars, level)
        except Exception as exc:  # kept per host: one broken node never stops the others
            found = exc
        finished(name, found)
        return found

    names = list(targets)
    routed = [h for shard in shards.values() for h in shard.hosts]
    steps.phase("collecting evidence", names + routed)
    for name in routed:
        steps.started_host(name)
    through = functools.partial(collect_shards, on_detach=on_detach, finished=finished)
    remote = in_background(functools.partial(through, shards, level, run_dir))
    store: dict[str, Outcome] = dict(zip(names, _parallel(attempt, names), strict=True))
    store |= remote()
    # pairs never cross halls: the controller's nodes pair among themselves from here,
    # each domain's among themselves on its executor, all at once
    ok = {n: store[n].entry() for n in names if isinstance(store[n], NodeEvidence)}
    collected = sum(isinstance(o, NodeEvidence) for o in store.values())
    steps.phase(f"pair probes among {collected} node(s)")
    through = in_background(functools.partial(pair_shards, shards, store, run_dir))
    deadlines = {
        n: host_deadline(targets[n][1], "gpuboot_pair_timeout", PAIR_DEADLINE_S) for n in ok
    }
    run_pair_probes(ok, _pair_runner({n: targets[n][0] for n in ok}, deadlines), deadlines)
    store |= through()  # a domain whose round was lost: its nodes not judged
    return store


# The controller's CPU of a run by phase, in its report: what reaching the nodes costs
# (the pre-flight, collection, pair probes: what executors take over) apart from the
# evidence's work that stays on the controller whoever collected it (keeping it, judging).
CPU_PHASES = ("reach", "keep", "judge")


class _CpuClock:
    """CPU seconds of this process (all its threads) and of the children it has waited
    for, lap by lap: the phases run one after another, each reaping its own processes."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = self._now()

    @staticmethod
    def _now() -> float:
        me, kids = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    def lap(self, phase: str) -> None:
        now = self._now()
        self.laps[phase] = round(now - self._last, 3)
        self._last = now


def keep_bundle(bundle: Path, store: dict[str, Outcome]) -> None:
    """``<bundle>/<host>/`` for every node that answered; a node whose evidence cannot be
    kept safely becomes that node's ERROR, not the run's."""
    for name, entry in list(store.items()):
        if not isinstance(entry, NodeEvidence):
            continue
        try:
            write_host_bundle(bundle_host_dir(bundle, name), entry.evidence, entry.meta)
        except (GpubootError, OSError) as exc:
            store[name] = exc


def not_judged(host: str, exc: ExecutorLost) -> NodeReport:
    """A node whose executor was lost before its answer arrived: neither judged nor bad
    (verdict UNKNOWN: never certified, never taken out), each rule ERROR with the reason
    (a scan reads it as not judged, never as drift)."""
    findings = [
        rules.Finding(r.id, r.title, rules.ERROR, exc.message, LOST_ACTION, r.severity)
        for r in rules.RULES
    ]
    return replace(node_report(host, findings), verdict=UNKNOWN)


Observe = Callable[[Evidence, NodeReport], Any]


def judge(name: str, outcome: Outcome, observe: Observe | None = None) -> NodeReport:
    """The node's report; with ``observe``, what it reads in the evidence besides, read
    right after the rules so their parses of this node are reused (gpuboot.checks.base)."""
    if isinstance(outcome, ExecutorLost):
        return not_judged(name, outcome)
    if isinstance(outcome, Exception):
        return unjudged(name, outcome)
    if outcome.profile is None:
        return unjudged(name, HostUnreachable("host has no gpuboot_profile", where=name))
    ctx = rules.NodeContext(
        host=name, profile=outcome.profile, hostvars=outcome.hostvars, meta=outcome.meta
    )
    report = node_report(name, rules.evaluate(outcome.evidence, ctx))
    if observe is not None:
        report = replace(report, observed=observe(outcome.evidence, report))
    return report


def run(
    inventory: str | Path | Inventory,
    *,
    limit: str | None = None,
    probes: str | None = None,
    bundle_root: str | Path | None = None,
    progress: Callable[[str], None] = lambda _m: None,
    transport: Transport | None = None,
    verb: str = "certify",
    observe: Observe | None = None,
) -> RunReport:
    """Certify the inventory's nodes (``limit``: Ansible's host pattern). ``inventory`` is
    a path, loaded and checked here before any host is touched, or an Inventory a caller
    already loaded. ``transport`` defaults to gpuboot.transport.connector's. ``verb`` names
    the run (its directory, its progress): a scan's runs are scans, never certifications.
    ``observe``: read in each judged node's evidence too, kept as its report's ``observed``."""
    from gpuboot.runner import new_run_dir

    inv = inventory if isinstance(inventory, Inventory) else load_inventory(inventory)
    hosts = select_hosts(inv, limit)  # Ansible's reading of --limit, before any run dir
    for name in hosts:
        check_deadlines(name, inv.resolved(name), str(inv.path))
    cpu = _CpuClock()
    direct, shards = plan_shards(inv, hosts)  # executors asked their versions, no host yet
    ran_by = {h: name for name, shard in shards.items() for h in shard.hosts}
    if transport is None:
        from gpuboot.transport import connector

        connect = connector(inv)

        def transport(name: str, _hostvars: dict[str, Any]) -> Any:
            return connect(name)

    run_id, run_dir = new_run_dir(verb)
    bundle = Path(bundle_root) / run_id if bundle_root else run_dir / "bundle"
    paths.private_dir(bundle)
    progress(f"{verb}: collecting evidence and checking {len(hosts)} host(s)")
    started = time.monotonic()
    targets: dict[str, tuple[Any, dict[str, Any]]] = {}
    failed: dict[str, Outcome] = {}
    for name in direct:
        try:
            # judged with the variables install hands the roles (the inventory's view)
            targets[name] = (transport(name, inv.hosts[name]), inv.resolved(name))
        except Exception as exc:  # a transport that cannot be built: that node's ERROR
            failed[name] = exc
    # a stale scan is worthless: an executor cancels it when the controller goes away;
    # certify's probes cost minutes: it finishes into the spool
    on_detach = "cancel" if verb == "scan" else "finish"
    try:
        store = {
            **collect_nodes(targets, probes, progress, shards, run_dir, on_detach),
            **failed,
        }
    except KeyboardInterrupt:
        stopped = f"{verb} stopped before a verdict; its run dir: {run_dir}"
        raise KeyboardInterrupt(stopped) from None
    cpu.lap("reach")
    for name, outcome in store.items():
        if isinstance(outcome, NodeEvidence):  # the bundle says who collected it
            outcome.meta["executor"] = ran_by.get(name, CONTROLLER)
    keep_bundle(bundle, store)
    cpu.lap("keep")
    steps = phases(progress)
    steps.phase("judging", list(store))
    # a node without evidence is ERROR at once; a node's evidence is judged in a worker
    unread = {n: judge(n, o) for n, o in store.items() if not isinstance(o, NodeEvidence)}
    for name in unread:
        steps.finished_host(name)
    judged = unread | judging.judge_within_deadlines(
        {n: functools.partial(judge, n, store[n], observe) for n in store if n not in unread},
        lambda name: host_deadline(inv.resolved(name), "gpuboot_judge_timeout", JUDGE_DEADLINE_S),
        unjudged,
        steps.finished_host,
        "gpuboot_judge_timeout",
    )
    if observe is not None:  # a node judged without its evidence (unread, late) shows nothing
        judged = {
            n: r if r.observed is not None else replace(r, observed=observe({}, r))
            for n, r in judged.items()
        }
    cpu.lap("judge")
    nodes = tuple(
        replace(judged[name], executor=ran_by.get(name, CONTROLLER)) for name in sort_hosts(store)
    )
    if not nodes:
        raise RunError("nothing could be judged", where=str(run_dir), hint="read the run dir")
    write_manifest(bundle, run_id, {n.host: n.verdict for n in nodes})
    return RunReport(
        run_id=run_id,
        run_dir=run_dir,
        bundle=bundle,
        elapsed_s=round(time.monotonic() - started, 2),
        probes=probes,
        nodes=nodes,
        controller_cpu_s=cpu.laps,
    )
