"""One batch of a play across the controller and the executors, merged into one result.

The batch's hosts are split by route: the controller's own play runs in this thread (it
owns Ctrl-C), each executor's shard runs at once in a thread of its own. Every host's
result says who ran it. A host an executor did not finish -- its shard lost, or the
executor did not answer the pre-flight -- is ``unknown`` with the reason and the command
that finishes it: never ok, never failed. Progress sees every event of every source, and
one end of batch once they all ended.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.executor.outcome import COMPLETE, UNKNOWN, ShardOutcome
from gpuboot.executor.route import CONTROLLER
from gpuboot.executor.shards import not_run, run_shards
from gpuboot.executor.stream import Executor, ShardJob
from gpuboot.runner import EventFolder, HostResult, PlayResult, hosts_doc

# (the hosts to play, an event hook) -> gpuboot.runner.run's result, raising as it does
ControllerPlay = Callable[[list[str], Callable[..., None]], PlayResult]
OnEvent = Callable[[dict[str, Any], dict[str, HostResult]], None]
NEVER_REACHED = "the play never reached this host"
END_OF_BATCH = {"event": "playbook_on_stats", "event_data": {}}


class _Merged:
    """The batch's results as they arrive from every source, for progress."""

    def __init__(self, on_event: OnEvent | None, routes: dict[str, list[str]]):
        self.on_event = on_event
        self.routes = routes
        self.lock = threading.Lock()
        self.controller: dict[str, HostResult] = {}
        self.folders: dict[str, EventFolder] = {}

    def view(self) -> dict[str, HostResult]:
        found = dict(self.controller)
        for name, folder in self.folders.items():
            for host, result in folder.hosts.items():
                if host in self.routes.get(name, ()):  # an executor speaks for its own hosts
                    result.executor = name
                    found[host] = result
        return found

    def _show(self, event: dict[str, Any]) -> None:
        # one source's stats do not end the batch: the others go on
        if self.on_event is not None and event.get("event") != "playbook_on_stats":
            self.on_event(event, self.view())

    def from_controller(self, event: dict[str, Any], hosts: dict[str, HostResult]) -> None:
        with self.lock:
            self.controller = hosts
            self._show(event)

    def from_shard(self, executor: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.folders.setdefault(executor, EventFolder())(event)
            self._show(event)


def shard_results(executor: str, out: ShardOutcome, hint: str) -> dict[str, HostResult]:
    """Per host of a shard: what its journal proves, or unknown with why and ``hint``."""
    results = {}
    for host, verdict in out.hosts.items():
        if verdict == UNKNOWN and out.state == COMPLETE:  # the play ended without it
            result = HostResult(host=host, failed=1, reason=NEVER_REACHED)
        elif verdict == UNKNOWN:
            why = f"executor {executor}: shard {out.state}: {out.reason or 'no reason given'}"
            result = HostResult(host=host, unknown=True, reason=f"{why}; to finish it: {hint}")
        else:
            result = out.results[host]
        result.executor = executor
        results[host] = result
    return results


def play_batch(
    routes: dict[str, list[str]],
    *,
    controller: ControllerPlay,
    jobs: dict[str, tuple[Executor, ShardJob]],
    unanswered: dict[str, str],
    run_dir: Path,
    results_dir: Path,
    hint: str,
    on_event: OnEvent | None = None,
) -> dict[str, HostResult]:
    """Play one batch: ``routes`` (route.routing's), the controller's play for its hosts,
    ``jobs`` for the executors that answered, ``unanswered`` executor -> why not. When
    executors ran any, the merged results go to ``results_dir/results.json`` with each
    shard's outcome (the controller's play alone keeps gpuboot.runner's)."""
    merged = _Merged(on_event, routes)
    outcomes: dict[str, ShardOutcome] = {
        name: not_run(routes[name], f"the executor did not answer: {reason}")
        for name, reason in unanswered.items()
        if name in routes
    }
    runner = threading.Thread(
        target=lambda: outcomes.update(run_shards(list(jobs.values()), run_dir, merged.from_shard)),
        daemon=True,
    )
    runner.start()
    found: dict[str, HostResult] = {}
    played: PlayResult | None = None
    interrupted = False
    try:
        if routes.get(CONTROLLER):
            result = controller(routes[CONTROLLER], merged.from_controller)
            played = result
            found.update(
                {h: result.hosts.get(h) or HostResult(host=h, failed=1, reason=NEVER_REACHED)
                 for h in routes[CONTROLLER]}
            )  # fmt: skip
    except KeyboardInterrupt:
        # not waited for: each shard goes on into its executor's spool, --resume reads it
        interrupted = True
        raise
    finally:
        if not interrupted:
            runner.join()  # the shards' results are the batch's too, however the play ended
    for name, out in outcomes.items():
        found.update(shard_results(name, out, hint))
    if outcomes:  # executors ran some: the batch's results.json holds every host
        doc: dict[str, Any] = {
            "hosts": hosts_doc(found),
            "shards": {n: {**o.to_dict(), "executor": n} for n, o in outcomes.items()},
        }
        if played is not None:
            doc["controller"] = {k: v for k, v in played.to_dict().items() if k != "hosts"}
        paths.write_private(results_dir / "results.json", json.dumps(doc, indent=2))
    if on_event is not None:
        on_event(END_OF_BATCH, found)
    return found
