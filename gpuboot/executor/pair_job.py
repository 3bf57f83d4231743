"""certify's pair probes among the nodes of one domain, run inside its hall by the
domain's executor and judged on the controller.

The controller plans the pairs as for a direct run (gpuboot.checks.pair_phase: the ring,
its rounds, the re-tests with known-good partners) and hands each round to ``rounds_on``:
one job on the executor running the shipped pairs.yml, a linear play of three raw tasks.
Every server starts its tool in the background, its output kept in a private directory on
the node; then every client runs its tool after the server's head start; then every
server waits for its tool (within the tool's own timeout) and sends what it printed. Each
side's answer carries its size and sha256 (collect_job.wrapped) and comes back as the
ProbeOutput a direct run's side gives, into the same judging (gpuboot.probes.pairs).

A side's deadline (``gpuboot_pair_timeout``) is its task's timeout: a hung side is late,
as in a direct run, and its partner re-tested. An answer cut or altered on the way is
ERROR for that side, never a bandwidth verdict. A round whose job was lost ends the
domain's pair phase: its nodes are not judged (UNKNOWN), never failed.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks.pair_phase import run_pair_probes
from gpuboot.errors import GpubootError
from gpuboot.executor import shards
from gpuboot.executor.collect_fleet import Shard
from gpuboot.executor.collect_job import ANSWERED, AnswerCorrupted, ExecutorLost, unwrap, wrapped
from gpuboot.executor.outcome import COMPLETE
from gpuboot.executor.stream import Executor
from gpuboot.inventory.executors import domain_of
from gpuboot.node_collect import NodeEvidence, host_deadline
from gpuboot.probes import pairs

PLAYBOOK = "pairs.yml"
START = "PAIR-001 | AUDIT | Start each server's pair tool in the background"
CLIENT = "PAIR-002 | AUDIT | Run each client's pair tool once its server listens"
ANSWER = "PAIR-003 | AUDIT | Wait for each server's pair tool and send its answer"
# Where a server's tool keeps its output between the play's first and last task: a
# directory only the node's user reads, named by a token of the controller's.
SERVER_DIR = "/tmp/gpuboot-pair-{token}"
Side = pairs.Side


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# The inner command of a side's answer (wrapped): its tool's stdout and stderr, each in
# base64 on a line of its own, and the tool's exit code as its own.
_SEND = "\n".join(
    [
        "base64 <\"$d/out\" | tr -d '\\n'",
        "echo",
        "base64 <\"$d/err\" | tr -d '\\n'",
        'exit "$(cat "$d/rc")"',
    ]
)


def _tool(command: str) -> str:
    """Run the tool with its output kept in "$d"; its exit code last, once it is whole."""
    return "\n".join(
        ["(", command, ') >"$d/out" 2>"$d/err"', 'echo $? >"$d/rc.part"', 'mv "$d/rc.part" "$d/rc"']
    )


def start_script(token: str, command: str, keep_s: int) -> str:
    """The server's first task: its tool started in a session of its own (it outlives the
    task's ssh session), all of its output kept in the server's directory. The directory
    goes ``keep_s`` seconds after the tool ended, had no answer task taken it (the answer
    task timed out, or the round was cancelled): nothing is left on the node."""
    where = SERVER_DIR.format(token=token)
    run = f'{_tool(command)}\nsleep {int(keep_s)}\nrm -rf "$d"'
    return "\n".join(
        [
            f"d={where}",
            'mkdir -m 700 "$d" || exit 97',
            f"printf '%s' '{_b64(run)}' | base64 -d >\"$d/run\" || exit 97",
            "command -v setsid >/dev/null || exit 98",
            # ssh's tty hangs up when this script ends, maybe before the tool's own
            # session exists: the hangup is ignored from the fork on
            "trap '' HUP",
            'd="$d" setsid sh "$d/run" </dev/null >/dev/null 2>&1 &',
        ]
    )


def answer_script(token: str) -> str:
    """The server's last task: wait for its tool (the task's timeout bounds the wait),
    send its answer, remove its directory."""
    where = SERVER_DIR.format(token=token)
    return "\n".join(
        [
            f"d={where}",
            'while [ ! -e "$d/rc" ]; do sleep 0.1; done',
            wrapped(_SEND),
            'rm -rf "$d"',
        ]
    )


def client_script(command: str) -> str:
    """The client's task: its server's head start, its tool, its answer."""
    return "\n".join(
        [
            f"sleep {pairs.SERVER_HEAD_START_S:g}",
            "d=$(mktemp -d) || exit 97",
            wrapped(_tool(command) + "\n" + _SEND),
            'rm -rf "$d"',
        ]
    )


def late_message(seconds: float) -> str:
    """A hung side's words, as a direct run's deadline puts them (gpuboot.remote)."""
    return (
        f"pair probe timed out after {seconds:.0f}s (the node held the session: a tool "
        "stuck in the kernel, or no answer); its ssh was ended"
    )


def read_answer(stdout: str) -> ProbeOutput:
    """A side's output from its wrapped answer, or AnswerCorrupted."""
    rc, body = unwrap(stdout)
    lines = body.split("\n")
    if len(lines) != 2:
        raise AnswerCorrupted(f"the pair probe's answer has {len(lines)} lines, not 2")
    try:
        out, err = (
            base64.b64decode(line, validate=True).decode(errors="replace") for line in lines
        )
    except (binascii.Error, ValueError) as exc:
        raise AnswerCorrupted(f"the pair probe's answer is not base64: {exc}") from None
    return ProbeOutput(out, err, rc)


def side_of(event: dict[str, Any] | None, deadline: float, executor: str) -> Side:
    """One side's output from the event of its last task (None: none arrived)."""
    if event is None:
        return ProbeOutput("", f"executor {executor} returned no answer for the side", 124), True
    res = (event.get("event_data") or {}).get("res") or {}
    why = str(res.get("msg") or "")
    if res.get("timedout"):
        return ProbeOutput("", late_message(deadline), 124), True
    if event["event"] == "runner_on_unreachable":  # as a direct run's ssh failure
        return ProbeOutput("", f"unreachable from executor {executor}: {why}", 255), False
    if event["event"] != "runner_on_ok":  # the server's tool did not start
        said = str(res.get("stderr") or res.get("stdout") or why).strip()
        return ProbeOutput(
            "", f"the pair tool did not start: {said}", int(res.get("rc") or 1)
        ), False
    try:
        return read_answer(str(res.get("stdout") or "")), False
    except AnswerCorrupted as exc:  # not the node's figure: ERROR, never a verdict
        return ProbeOutput("", f"{exc.message} (through executor {executor})", 124), True


def _keep(events: dict[tuple[str, str], dict[str, Any]], event: dict[str, Any]) -> None:
    data = event.get("event_data") or {}
    if event.get("event") in ANSWERED and data.get("host") and data.get("task"):
        events[(str(data["host"]), str(data["task"]))] = event


def rounds_on(
    executor: Executor,
    connections: Mapping[str, dict[str, Any]],
    deadlines: Mapping[str, float],
    run_dir: Path,
) -> pairs.RoundRunner:
    """A round runner: each round one job on ``executor``, each under its own shard dir of
    ``run_dir``. ``connections``: host -> how the executor reaches it; ``deadlines``:
    host -> a side's seconds. A lost job raises ExecutorLost."""

    def play(commands: list[tuple[str, str, str, str]]) -> list[tuple[Side, Side]]:
        hosts: dict[str, dict[str, Any]] = {}
        tokens: dict[str, str] = {}
        # after a server's tool ended, the round has at most every client's task and its
        # own answer task left: its directory is kept that long, then goes
        keep_s = 2 * int(max(deadlines[h] for c in commands for h in c[:2])) + 10
        for server, client, server_cmd, client_cmd in commands:
            tokens[server] = uuid.uuid4().hex
            hosts[server] = {
                **connections[server],
                "gpuboot_pair_role": "server",
                "gpuboot_pair_start_b64": _b64(start_script(tokens[server], server_cmd, keep_s)),
                "gpuboot_pair_answer_b64": _b64(answer_script(tokens[server])),
                "gpuboot_pair_timeout_s": max(1, int(deadlines[server])),
            }
            hosts[client] = {
                **connections[client],
                "gpuboot_pair_role": "client",
                "gpuboot_pair_client_b64": _b64(client_script(client_cmd)),
                "gpuboot_pair_timeout_s": max(1, int(deadlines[client])),
            }
        where = shards.shard_dir(run_dir, executor.name)
        # a round the controller stopped reading is worth nothing: cancelled, never finished
        job = shards.build_job(where, hosts, PLAYBOOK, on_detach="cancel")
        events: dict[tuple[str, str], dict[str, Any]] = {}
        out = shards.run_one(executor, job, where, lambda event: _keep(events, event))
        if out.state != COMPLETE:
            raise ExecutorLost(
                f"not judged: executor {executor.name} lost during the pair probes: "
                f"{out.reason or out.status or 'no answer'}"
            )
        sides = []
        for server, client, _s, _c in commands:
            started = events.get((server, START))
            ended = started if started and started["event"] != "runner_on_ok" else None
            ended = ended or events.get((server, ANSWER))
            srv = side_of(ended, deadlines[server], executor.name)
            cli = side_of(events.get((client, CLIENT)), deadlines[client], executor.name)
            sides.append((srv, cli))
        return sides

    return play


def _pair_domain(
    executor: Executor,
    members: dict[str, tuple[NodeEvidence, dict[str, Any]]],
    run_dir: Path,
) -> dict[str, ExecutorLost]:
    """The pair phase among one domain's nodes on its executor; the nodes not judged."""
    deadlines = {
        h: host_deadline(found.hostvars, "gpuboot_pair_timeout", pairs.PAIR_DEADLINE_S)
        for h, (found, _c) in members.items()
    }
    connections = {h: connection for h, (_f, connection) in members.items()}
    entries = {h: found.entry() for h, (found, _c) in members.items()}
    try:
        play = rounds_on(executor, connections, deadlines, run_dir)
        run_pair_probes(entries, deadlines=deadlines, play=play)
    except ExecutorLost as exc:
        return {h: ExecutorLost(exc.message, where=h) for h in members}
    except GpubootError as exc:  # a job that could not be built: the harness's, not a verdict
        why = f"not judged: the pair probes through executor {executor.name}: {exc.message}"
        return {h: ExecutorLost(why, where=h) for h in members}
    return {}


def pair_shards(
    planned: Mapping[str, Shard],
    store: Mapping[str, Any],
    run_dir: Path | None,
) -> dict[str, ExecutorLost]:
    """The pair probes among each executor's collected nodes, domain by domain (pairs
    never cross domains; a node alone in its domain has no partner, as in a direct run).
    Executors at once, one domain after the other on each; host -> why it is not judged,
    for the nodes of a domain whose round was lost."""
    work: list[Callable[[], dict[str, ExecutorLost]]] = []
    for shard in planned.values():
        if shard.executor is None:
            continue
        domains: dict[str, dict[str, tuple[NodeEvidence, dict[str, Any]]]] = {}
        for host, (connection, hostvars) in shard.hosts.items():
            found = store.get(host)
            if isinstance(found, NodeEvidence):
                domain = str(domain_of(hostvars))
                domains.setdefault(domain, {})[host] = (found, connection)
        if domains:
            if run_dir is None:
                raise ValueError("pair jobs need a run dir for their journals")
            work.append(_on_executor(shard.executor, list(domains.values()), run_dir))
    if not work:
        return {}
    with ThreadPoolExecutor(max_workers=len(work)) as pool:
        return {h: lost for found in pool.map(lambda w: w(), work) for h, lost in found.items()}


def _on_executor(
    executor: Executor,
    domains: list[dict[str, tuple[NodeEvidence, dict[str, Any]]]],
    run_dir: Path,
) -> Callable[[], dict[str, ExecutorLost]]:
    def run() -> dict[str, ExecutorLost]:
        lost: dict[str, ExecutorLost] = {}
        for members in domains:
            lost |= _pair_domain(executor, members, run_dir)
        return lost

    return run
