"""certify's and scan's collection for the hosts one executor runs: the collection of a
direct run, run inside the hall and judged on the controller.

Each host's collection command is computed here exactly as a direct run computes it
(gpuboot.node_collect), wrapped so its answer carries its own size and sha256, and run by
the shipped collect.yml play as one shard on the executor. Each host's answer comes back
in its event (journaled as it arrives); once its manifest checks, it is handed to the same
``collect_node`` a direct run calls, through a host that answers with what the executor
relayed: the same unpack, Evidence, meta and bundle, so the rules on the controller give
the same verdicts by construction. An answer cut or altered on the way is ERROR for that
host; a host whose answer never arrived because the shard was lost is not judged.
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuboot.collect import script, state_probes
from gpuboot.errors import GpubootError
from gpuboot.executor import shards
from gpuboot.executor.outcome import UNKNOWN
from gpuboot.executor.stream import Executor
from gpuboot.node_collect import (
    HostUnreachable,
    NodeEvidence,
    boot_id_probe,
    collect_deadline,
    collect_node,
    package_probes,
)
from gpuboot.probes import node_probes, resolve_level
from gpuboot.profiles import load_profile
from gpuboot.remote import RemoteTimeout
from gpuboot.runner import EVENT_RES_MAX

PLAYBOOK = "collect.yml"
# collect.yml's one task: a host that reached it has answered
TASK = "COLL-001 | AUDIT | Collect the node's evidence for the controller to judge"
BEGIN = "gpuboot-collect-begin"
END = "gpuboot-collect-end"
# What a login shell prints after it (a logout script) is no part of the answer.
_END_LINE = re.compile(rf"\n{END} (\d{{1,3}}) (\d{{1,15}}) ([0-9a-f]{{64}})(?:\n|\Z)")
# The task's ends for a host: its answer, its failure (ssh, the deadline), unreachable.
ANSWERED = ("runner_on_ok", "runner_on_failed", "runner_on_unreachable")


class AnswerCorrupted(GpubootError):
    """A host's answer as the executor relayed it is not what the node wrote: cut short or
    altered on the way (ERROR, never a hardware verdict)."""


class ExecutorLost(GpubootError):
    """The shard that ran the host was lost before the host's answer arrived: the host is
    not judged (never certified, never taken out)."""


def wrapped(command: str) -> str:
    """``command`` as the node runs it through the executor: its stdout kept whole in a
    file, then sent between a begin line and an end line carrying its exit code, size and
    sha256 (the end-to-end check of what the executor relays)."""
    return "\n".join(
        [
            "f=$(mktemp) || exit 97",
            "(",
            command,
            ') >"$f"',
            "rc=$?",
            f"echo {BEGIN}",
            'cat "$f"',
            f'printf \'\\n{END} %s %s %s\\n\' "$rc" "$(wc -c <"$f")" '
            '"$(sha256sum <"$f" | cut -c1-64)"',
            'rm -f "$f"',
        ]
    )


def unwrap(stdout: str) -> tuple[int, str]:
    """(the command's exit code, its stdout) from a wrapped answer, or AnswerCorrupted."""
    text = stdout.replace("\r\n", "\n")  # ssh's tty turns each newline into CRLF
    begin = text.rfind(f"{BEGIN}\n")
    end = next(reversed(list(_END_LINE.finditer(text))), None)
    if begin < 0 or end is None or end.start() < begin:
        raise AnswerCorrupted(
            "the collection answer arrived without its begin or end line: cut short on the "
            "way from the node through the executor"
        )
    body = text[begin + len(BEGIN) + 1 : end.start()]
    raw = body.encode()
    rc, size, digest = int(end.group(1)), int(end.group(2)), end.group(3)
    if len(raw) != size or hashlib.sha256(raw).hexdigest() != digest:
        raise AnswerCorrupted(
            f"the collection answer does not match its manifest ({len(raw)} bytes received "
            f"of the {size} the node wrote, or another sha256): altered or cut on the way"
        )
    return rc, body


@dataclass(frozen=True)
class Planned:
    script: str  # collect_node's command for the host, as a direct run sends it
    deadline: float  # the host's collection deadline: the task's timeout


def plan(hostvars: dict[str, Any], level_override: str | None) -> Planned:
    """The host's collection command and deadline, computed as collect_node computes them
    (a test holds the two equal: a change to one that misses the other fails it)."""
    profile = load_profile(hostvars["gpuboot_profile"]) if "gpuboot_profile" in hostvars else None
    level = resolve_level(hostvars, level_override)
    state = (*package_probes(state_probes(profile, hostvars), hostvars), boot_id_probe(hostvars))
    bandwidth = node_probes(profile, hostvars, level) if profile else []
    procfs = hostvars.get("gpuboot_procfs", "/proc")
    sysfs = hostvars.get("gpuboot_sysfs", "/sys")
    return Planned(
        script(procfs, sysfs, state, bandwidth), collect_deadline(hostvars, (*state, *bandwidth))
    )


@dataclass(frozen=True)
class _Answer:  # what testinfra's run() gives back, as the executor relayed it
    rc: int
    stdout: str
    stderr: str


class _Relayed:
    """A node whose answer already came back through the executor: collect_node runs on
    it as on a live one. It answers only the command that was sent."""

    def __init__(self, sent: str, answer: _Answer):
        self._sent, self._answer = sent, answer

    def run(self, command: str) -> _Answer:
        if command.split("\n", 1)[-1] != self._sent:  # run_with_deadline's token line off
            raise AnswerCorrupted("the collection judged is not the one the executor ran")
        return self._answer


Outcome = NodeEvidence | Exception


def _keep_answer(answers: dict[str, dict[str, Any]], event: dict[str, Any]) -> None:
    """Keep the event of collect.yml's task for its host (ok, failed or unreachable)."""
    data = event.get("event_data") or {}
    if data.get("task") == TASK and data.get("host") and event.get("event") in ANSWERED:
        answers[str(data["host"])] = event


def event_failure(
    name: str, event: dict[str, Any] | None, executor: str, what: str, deadline: float
) -> GpubootError | None:
    """The error a direct run would raise for a host whose task event says it did not
    answer (no event, unreachable, timed out, failed, its answer dropped from the event);
    None when the event holds an answer to check."""
    if event is None:
        return HostUnreachable(f"executor {executor} returned no answer for the host", where=name)
    res = (event.get("event_data") or {}).get("res") or {}
    if event["event"] == "runner_on_unreachable":
        why = str(res.get("msg") or "unreachable")
        return HostUnreachable(f"unreachable from executor {executor}: {why}", where=name)
    if event["event"] == "runner_on_ok" and not res:
        return AnswerCorrupted(
            f"the answer is missing from its event on executor {executor}: larger than "
            f"ansible-runner's event limit ({EVENT_RES_MAX} characters)",
            where=name,
        )
    if res.get("timedout"):
        return RemoteTimeout(
            f"{what} timed out after {deadline:.0f}s on executor {executor} (the node held "
            "the session: a tool stuck in the kernel, or no answer)",
            where=name,
        )
    if event["event"] != "runner_on_ok":
        why = str(res.get("msg") or "the task failed")
        return HostUnreachable(f"{what} failed on executor {executor}: {why}", where=name)
    return None


def _outcome(
    name: str,
    event: dict[str, Any] | None,
    planned: Planned,
    hostvars: dict[str, Any],
    level: str | None,
    executor: str,
) -> Outcome:
    failed = event_failure(name, event, executor, "evidence collection", planned.deadline)
    if failed is not None:
        return failed
    res = (event.get("event_data") or {}).get("res") or {}
    try:
        rc, stdout = unwrap(str(res.get("stdout") or ""))
        answer = _Answer(rc, stdout, str(res.get("stderr") or ""))
        found = collect_node(name, _Relayed(planned.script, answer), hostvars, level)
    except GpubootError as exc:
        exc.where = name
        return exc
    _timed(found.meta, event.get("event_data") or {})
    return found


def _timed(meta: dict[str, Any], data: dict[str, Any]) -> None:
    """meta.json's collection time and duration as the executor measured them (collect_node
    timed only the hand-over of the answer already relayed)."""
    try:
        start = datetime.fromisoformat(str(data["start"])).astimezone(UTC)
        meta["collect_s"] = round(float(data["duration"]), 3)
    except (KeyError, TypeError, ValueError):
        return
    meta["collected_at"] = start.strftime("%Y-%m-%dT%H:%M:%SZ")


def collect_on(
    executor: Executor,
    targets: Mapping[str, tuple[dict[str, Any], dict[str, Any]]],
    level: str | None,
    where: Path,
    *,
    on_detach: str = "finish",
) -> dict[str, Outcome]:
    """Every host's evidence (``targets``: name -> (its connection variables for the
    shard's inventory, its resolved variables)) collected through ``executor`` as one
    shard under ``where``; a host's exception is kept as its outcome, as in a direct run."""
    store: dict[str, Outcome] = {}
    planned: dict[str, Planned] = {}
    for name, (_connection, hostvars) in targets.items():
        try:
            planned[name] = plan(hostvars, level)
        except Exception as exc:  # kept per host: one broken node never stops the others
            store[name] = exc
    if not planned:
        return store
    hosts = {
        name: {
            **targets[name][0],
            "gpuboot_collect_b64": base64.b64encode(wrapped(p.script).encode()).decode(),
            "gpuboot_collect_timeout_s": max(1, int(p.deadline)),
        }
        for name, p in planned.items()
    }
    job = shards.build_job(
        where, hosts, PLAYBOOK, final_task=TASK, on_detach=on_detach, job_id=uuid.uuid4().hex[:16]
    )
    answers: dict[str, dict[str, Any]] = {}
    out = shards.run_one(executor, job, where, lambda event: _keep_answer(answers, event))
    for name, p in planned.items():
        if out.hosts.get(name, UNKNOWN) == UNKNOWN:
            store[name] = ExecutorLost(
                f"not judged: executor {executor.name} lost: {out.reason or 'no answer'}",
                where=name,
            )
        else:
            store[name] = _outcome(
                name, answers.get(name), p, targets[name][1], level, executor.name
            )
    return store
