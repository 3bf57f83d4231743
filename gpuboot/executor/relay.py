"""A command per host run through an executor, each host's answer checked end to end: what a
verb that reads nodes with one command each (plan's package read) needs to read the hosts
of a hall the controller cannot reach.

The command is the verb's own, run by the shipped collect.yml play as one shard on the
executor, wrapped (gpuboot.executor.collect_job.wrapped) so its answer carries its exit
code, size and sha256: an answer that arrives is byte for byte what the node wrote, or it
is AnswerCorrupted. The verb then reads it as it reads a direct answer. A host whose answer
never arrived because the shard was lost is ExecutorLost (unknown, never a node's fault).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot.errors import GpubootError
from gpuboot.executor import shards
from gpuboot.executor.collect_job import (
    ANSWERED,
    BEGIN,
    PLAYBOOK,
    TASK,
    ExecutorLost,
    event_failure,
    unwrap,
    wrapped,
)
from gpuboot.executor.outcome import UNKNOWN
from gpuboot.executor.stream import Executor
from gpuboot.remote import AnswerTooLarge


@dataclass(frozen=True)
class Command:
    connection: dict[str, Any]  # Ansible's connection variables for the shard's inventory
    text: str  # the shell command, as a direct run sends it
    deadline: float  # seconds: the task's timeout
    what: str  # what the command does, for the messages ("reading installed packages")
    max_bytes: int  # the largest answer the verb reads (a direct run's cap)


@dataclass(frozen=True)
class Answer:  # what testinfra's run() gives a direct run
    rc: int
    stdout: str
    stderr: str


def _keep(answers: dict[str, dict[str, Any]], event: dict[str, Any]) -> None:
    data = event.get("event_data") or {}
    if data.get("task") == TASK and data.get("host") and event.get("event") in ANSWERED:
        answers[str(data["host"])] = event


def _answer(
    name: str, event: dict[str, Any] | None, cmd: Command, executor: str
) -> Answer | GpubootError:
    """The host's Answer, or the error a direct run would raise for it."""
    failed = event_failure(name, event, executor, cmd.what, cmd.deadline)
    if failed is not None:
        return failed
    res = (event.get("event_data") or {}).get("res") or {}
    stdout = str(res.get("stdout") or "")
    try:
        rc, body = unwrap(stdout)
    except GpubootError as exc:
        exc.where = name
        return exc
    if len(body.encode()) > cmd.max_bytes:
        return AnswerTooLarge(
            f"{cmd.what}: the node's answer passed the cap of {cmd.max_bytes} bytes; nothing "
            "of it was kept",
            where=name,
        )
    # the node's stderr: apart on a plain channel, before the answer's begin line on a tty
    text = stdout.replace("\r\n", "\n")
    before = text[: text.rfind(f"{BEGIN}\n")]
    return Answer(rc, body, str(res.get("stderr") or "") + before)


def run_on(
    executor: Executor, commands: Mapping[str, Command], where: Path, *, on_detach: str = "cancel"
) -> dict[str, Answer | GpubootError]:
    """Each host's command run through ``executor`` as one shard under ``where`` (a
    shards.shard_dir); host -> its Answer or its error. A read is cancelled when the
    controller goes away (``on_detach``): a stale answer is worth nothing."""
    hosts = {
        name: {
            **cmd.connection,
            "gpuboot_collect_b64": base64.b64encode(wrapped(cmd.text).encode()).decode(),
            "gpuboot_collect_timeout_s": max(1, int(cmd.deadline)),
        }
        for name, cmd in commands.items()
    }
    job = shards.build_job(where, hosts, PLAYBOOK, final_task=TASK, on_detach=on_detach)
    answers: dict[str, dict[str, Any]] = {}
    out = shards.run_one(executor, job, where, lambda event: _keep(answers, event))
    found: dict[str, Answer | GpubootError] = {}
    for name, cmd in commands.items():
        if out.hosts.get(name, UNKNOWN) == UNKNOWN:
            why = out.reason or "no answer"
            found[name] = ExecutorLost(f"executor {executor.name} lost: {why}", where=name)
        else:
            found[name] = _answer(name, answers.get(name), cmd, executor.name)
    return found
