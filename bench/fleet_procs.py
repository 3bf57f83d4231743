"""The fleet bench's processes: timing a command with its controller CPU, the ping
baseline, and a lab that is taken down on every way out (an error, Ctrl-C, SIGTERM).

Imported by bench/fleet.py when it runs labs (its pure parts, tested alone, need none
of this).
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# How long a command stopped by Ctrl-C (or the bench's SIGTERM, passed on as SIGINT) may
# take to end its own run (ansible, ssh masters, executors' jobs) before it is killed.
STOP_GRACE_S = 60.0
SIGTERM_NOTE = "the bench got SIGTERM"


@dataclass
class Timing:
    wall_s: float
    cpu_s: float  # user+sys of the command and its waited-for descendants
    exit: int
    out: str = ""
    err: str = ""
    busy_s: float = 0.0  # every CPU of the machine busy meanwhile: the nodes' work too

    def json(self) -> dict[str, Any]:
        """What the command printed with --json, or {}."""
        try:
            doc = json.loads(self.out)
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat: all but idle and iowait):
    in the lab the nodes are containers on the controller's cores."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(v) for v in fh.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _cpu_since(before: resource.struct_rusage) -> float:
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _stop(proc: subprocess.Popen, why: BaseException) -> None:
    """End ``proc`` the way an operator's Ctrl-C would, then by force past the grace.
    A terminal's Ctrl-C reached it already (a second one could cut its cleanup short); a
    SIGTERM to the bench did not: it is passed on as the SIGINT gpuboot reads as "stop"."""
    try:
        if why.args == (SIGTERM_NOTE,) or not isinstance(why, KeyboardInterrupt):
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_all(cmds: list[list[str]], env: dict[str, str] | None = None) -> list[Timing]:
    """Every command at once, timed together (wall and CPU are the group's, on each)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = machine_busy_s()
    started = time.monotonic()
    procs = [
        subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in cmds
    ]
    try:
        outs = [p.communicate() for p in procs]
    except BaseException as exc:  # Ctrl-C, SIGTERM: no command outlives the bench
        for p in procs:
            _stop(p, exc)
        raise
    wall, cpu, busy = time.monotonic() - started, _cpu_since(before), machine_busy_s() - busy
    return [
        Timing(wall, cpu, p.returncode, o, e, busy) for p, (o, e) in zip(procs, outs, strict=True)
    ]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> Timing:
    return run_all([cmd], env)[0]


def ping(cmds: list[list[str]], env: dict[str, str]) -> Timing:
    """The baseline: every command at once (one per hall), timed together."""
    done = run_all(cmds, env)
    code = max(t.exit for t in done)
    if code != 0:
        tail = "".join(t.out + t.err for t in done)[-2000:]
        raise SystemExit(f"fleet bench: the ping baseline failed (exit {code}):\n{tail}")
    return done[0]


def hall_pings(inventory: Path, lab_doc: dict[str, Any]) -> list[list[str]]:
    """One `ansible -m ping` per hall, its nodes reached through the hall's executor."""
    import yaml

    inv = yaml.safe_load(inventory.read_text())
    allvars = inv["all"].get("vars", {})
    user = allvars.get("ansible_user", "root")
    key = allvars.get("ansible_ssh_private_key_file")
    cmds = []
    for hall in lab_doc["halls"]:
        nodes = [n["name"] for n in lab_doc["nodes"] if n.get("domain") == hall["domain"]]
        jump = ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        jump += ["-o", "BatchMode=yes", *(["-i", key] if key else []), "-W", "%h:%p"]
        jump.append(f"{user}@{hall['ip']}")
        ssh_args = (
            "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
            f"-o ProxyCommand={shlex.quote(shlex.join(jump))}"
        )
        extra = json.dumps({"ansible_ssh_common_args": ssh_args})
        cmds.append(["ansible", ",".join(nodes), "-i", str(inventory), "-m", "ping", "-e", extra])
    return cmds


def _terminated(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(SIGTERM_NOTE)


def stop_on_sigterm() -> None:
    """SIGTERM ends the bench as Ctrl-C does: through every `finally`, labs taken down."""
    signal.signal(signal.SIGTERM, _terminated)


def _down(gpuboot: str, name: str) -> None:
    """`gpuboot lab down`, deaf to a second Ctrl-C or SIGTERM (it, too: an ignored signal
    stays ignored in the child) so an impatient operator cannot leave the lab half down."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        subprocess.run([gpuboot, "lab", "down", "--name", name, "-q"], capture_output=True)
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


@contextmanager
def lab(gpuboot: str, name: str, up_args: list[str]) -> Iterator[Timing]:
    """`gpuboot lab up --name NAME ...` (its Timing, its --json in ``.json()``), and
    `gpuboot lab down --name NAME` on every way out, a failed or interrupted `up`
    included (it may have started containers before it stopped)."""
    try:
        t = timed([gpuboot, "lab", "up", "--name", name, "--json", "-q", *up_args])
        if t.exit != 0:
            error = t.json().get("error")  # gpuboot's --json error: message, where, hint
            said = error.get("message") if isinstance(error, dict) else error
            raise SystemExit(
                f"fleet bench: lab up failed (exit {t.exit}): {said or t.err.strip()[-300:]}"
            )
        yield t
    finally:
        _down(gpuboot, name)
