"""Judging a shard from its journal: what the worker's stream proves, and nothing more.

ansible-runner's ``process`` calls a job done when its reader stops, whatever stopped it:
a failed play, a killed worker and a stream cut half way all leave it without an error
and with rc None. A shard here is ``complete`` only when the worker's final status, its
end of stream and its rc have all arrived (``canceled`` when that status is a cancel);
anything less -- a cut stream, ssh's exit 255, silence past the heartbeat -- is ``lost``.
Per host: the play's final stats decide; before them a host is done only when it reached
the job's final task, and every other host of a shard that did not complete is
``unknown`` -- never ok, never failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuboot.executor.journal import Replay
from gpuboot.runner import EventFolder, HostResult

COMPLETE, CANCELED, LOST = "complete", "canceled", "lost"
# The worker's last status when the play ran to its end (ansible-playbook's rc decides).
FINISHED = ("successful", "failed")
# ssh's own exit status: the connection failed, whatever the remote command did.
SSH_FAILED = 255
UNKNOWN = "unknown"


@dataclass
class ShardOutcome:
    state: str  # complete | canceled | lost
    status: str | None  # the worker's last status
    rc: int | None  # ansible-playbook's, from the artifacts
    reason: str | None  # why the shard is not complete
    hosts: dict[str, str]  # host -> ok | changed | failed | unreachable | unknown
    results: dict[str, HostResult] = field(default_factory=dict)  # what arrived per host
    stats_seen: bool = False
    offset: int = 0  # stream bytes journaled: where a re-attach starts

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "status": self.status,
            "rc": self.rc,
            "reason": self.reason,
            "hosts": self.hosts,
            "stats_seen": self.stats_seen,
        }


def _missing(replay: Replay, channel_rc: int | None, cut: str | None) -> str | None:
    """Why the stream does not prove the shard's end; None when it does."""
    if cut:
        return cut
    if channel_rc == SSH_FAILED:
        return "ssh exited 255: the connection to the executor failed"
    if replay.status not in (*FINISHED, "canceled"):
        explained = f" ({replay.explanation})" if replay.explanation else ""
        return f"the worker's last status is {replay.status or 'none'}{explained}"
    if replay.rc is None:
        return "the artifacts (with the play's rc) never arrived"
    if not replay.eof:
        return "the end of the stream never arrived"
    return None


def _finished_hosts(events: list[dict[str, Any]], final_task: str | None) -> set[str]:
    if not final_task:
        return set()
    return {
        e["event_data"]["host"]
        for e in events
        if e.get("event") == "runner_on_ok"
        and (e.get("event_data") or {}).get("task") == final_task
        and (e.get("event_data") or {}).get("host")
    }


def judge(
    replay: Replay,
    hosts: tuple[str, ...],
    *,
    final_task: str | None = None,
    channel_rc: int | None = None,
    cut: str | None = None,
) -> ShardOutcome:
    folder = EventFolder()
    for event in replay.events:
        folder(event)
    reason = _missing(replay, channel_rc, cut)
    state = (CANCELED if replay.status == "canceled" else COMPLETE) if reason is None else LOST
    done = (
        set(folder.hosts)
        if folder.stats_seen and state == COMPLETE
        else _finished_hosts(replay.events, final_task)
    )
    # only the shard's own hosts: an executor's events naming any other host (another
    # hall's, the controller's) say nothing about it
    verdicts = {
        h: folder.hosts[h].status if h in done and h in folder.hosts else UNKNOWN
        for h in dict.fromkeys(hosts)
    }
    return ShardOutcome(
        state=state,
        status=replay.status,
        rc=replay.rc,
        reason=reason,
        hosts=verdicts,
        results={h: r for h, r in folder.hosts.items() if h in verdicts},
        stats_seen=folder.stats_seen,
        offset=replay.offset,
    )
