"""certify's and scan's collection across executors: which hosts each executor collects,
refused before any host is touched where it cannot be done, and every shard run at once.

A host with a ``gpuboot_domain`` is collected by an executor serving its domain (the
first that answered the pre-flight, gpuboot.executor.route); a domain none of whose
executors answered has its hosts not judged, never collected from the controller. The
pair probes among a domain's nodes run on its executor too (gpuboot.executor.pair_job).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpuboot.executor import route, shards
from gpuboot.executor.collect_job import ExecutorLost, Outcome, collect_on
from gpuboot.executor.stream import Executor
from gpuboot.inventory.executors import domain_of

if TYPE_CHECKING:
    from gpuboot.inventory import Inventory

CONTROLLER = route.CONTROLLER
T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """The hosts one executor collects: name -> (connection variables, resolved variables)."""

    executor: Executor | None  # None: no executor of their domain answered the pre-flight
    hosts: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    refused: str = ""  # why there is no executor


def _connection(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """What the executor's play needs to reach the node: Ansible's connection variables
    (address, user, port, key, ssh arguments, become), nothing of the stack."""
    return {k: v for k, v in hostvars.items() if k.startswith("ansible_")}


def plan_shards(inv: Inventory, hosts: list[str]) -> tuple[list[str], dict[str, Shard]]:
    """(the hosts the controller collects, executor name -> its Shard), asking each
    executor of the hosts' domains its versions first (skew: BadInput, before any host)."""
    if not inv.executors:
        return list(hosts), {}
    reasons = route.preflight(inv, route.candidates(inv, hosts))
    answered = [n for n, why in reasons.items() if why is None]
    routes = route.routing(inv, hosts, answered)
    planned: dict[str, Shard] = {}
    for name, names in routes.items():
        if name == CONTROLLER:
            continue
        members = {h: (_connection(inv.hosts[h]), inv.resolved(h)) for h in names}
        if reasons.get(name):
            why = (
                f"no executor of domain {domain_of(inv.hosts[names[0]])} answered: {reasons[name]}"
            )
            planned[name] = Shard(None, members, why)
        else:
            planned[name] = Shard(route.executor(inv, name), members)
    return routes.get(CONTROLLER, []), planned


def in_background(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` started on a daemon thread: a Ctrl-C on the controller never waits for a
    shard (its executor finishes a certify into the spool, cancels a scan). The call
    returned waits for ``fn``'s result, or raises what it raised."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["exc"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        if "exc" in box:
            raise box["exc"]
        return box["out"]

    return result


def collect_shards(
    planned: Mapping[str, Shard],
    level: str | None,
    run_dir: Path | None,
    *,
    on_detach: str,
    finished: Callable[[str, Outcome], None] = lambda _h, _o: None,
) -> dict[str, Outcome]:
    """Every shard's hosts collected at once (one thread per executor); host -> outcome,
    ``finished`` told each host's as its shard ends."""

    def one(name: str) -> dict[str, Outcome]:
        shard = planned[name]
        if shard.executor is None:
            store: dict[str, Outcome] = {
                h: ExecutorLost(f"not judged: {shard.refused}", where=h) for h in shard.hosts
            }
        else:
            where = shards.shard_dir(run_dir, name)
            store = collect_on(shard.executor, shard.hosts, level, where, on_detach=on_detach)
        for host, outcome in store.items():
            finished(host, outcome)
        return store

    if not planned:
        return {}
    if run_dir is None:
        raise ValueError("shards need a run dir for their journals")
    running = [in_background(partial(one, name)) for name in planned]
    return {h: o for result in running for h, o in result().items()}
