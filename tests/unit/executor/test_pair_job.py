"""certify's pair probes through an executor (gpuboot.executor.pair_job): one judge.

The same three nodes are paired directly (a local shell per side, behind the controller's
per-side deadline, as certify's transport) and through a local supervisor running
pairs.yml (ansible_connection: local); the attribution, every run and every evidence file
are identical. A hung side is ERROR naming the phase and its partner is re-tested; an
answer altered on the way is ERROR, never a bandwidth verdict; a domain whose round was
lost is not judged (UNKNOWN), never FAIL.
"""

from __future__ import annotations

import base64
import hashlib
import os
import pty
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from gpuboot import engine, remote
from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.pair_phase import run_pair_probes
from gpuboot.executor import pair_job
from gpuboot.executor.collect_fleet import Shard
from gpuboot.executor.collect_job import ExecutorLost
from gpuboot.executor.stream import Executor
from gpuboot.node_collect import NodeEvidence, host_deadline
from gpuboot.probes import pairs
from gpuboot.profiles import load_profile
from tests.unit.executor.conftest import (
    REPLAY,
    ShellNode,
    local_supervisor,
    python_channel,
    stream,
)

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
HOSTS = ("n1", "n2", "n3")


def _answer(out: str, err: str = "", rc: int = 0) -> str:
    body = "\n".join(base64.b64encode(t.encode()).decode() for t in (out, err))
    digest = hashlib.sha256(body.encode()).hexdigest()
    return f"gpuboot-collect-begin\n{body}\ngpuboot-collect-end {rc} {len(body)} {digest}\n"


def _ok(stdout: str) -> dict:
    return {"event": "runner_on_ok", "event_data": {"res": {"stdout": stdout, "rc": 0}}}


def test_a_sides_answer_reads_back_as_its_output():
    assert pair_job.read_answer(_answer("a line\n", "oops\n", 3)) == ProbeOutput(
        "a line\n", "oops\n", 3
    )
    assert pair_job.side_of(_ok(_answer("x")), 30, "ex1") == (ProbeOutput("x", "", 0), False)


@pytest.mark.parametrize(
    "stdout",
    [
        _answer("9.000").replace("OS4wMDA=", "OS4wMDE="),  # altered on the way
        _answer("9.000")[:-30],  # cut in its end line
        _answer("9.000").replace("gpuboot-collect-begin\n", ""),
        "",
    ],
    ids=["altered", "end-cut", "begin-lost", "empty"],
)
def test_an_altered_or_cut_answer_is_an_error_never_a_figure(stdout):
    out, late = pair_job.side_of(_ok(stdout), 30, "ex1")
    assert late and out.stdout == "" and "through executor ex1" in out.stderr
    spec = pairs.tcp_spec()
    run = pairs._judged(spec, "n1", "n2", (out, late), (ProbeOutput("", "", 0), False), 0.1, "")
    verdict, retries = pairs.attribute(["n1", "n2"], [run], lambda *_a: pytest.fail("no retry"))
    assert verdict["n1"]["status"] == "unattributed" and not retries  # ERROR, not pinned


def test_a_sides_deadline_and_ssh_failure_read_as_in_a_direct_run():
    # as ansible-core 2.19 reports a task past its timeout
    res = {"timedout": {"period": 6}, "msg": "Task failed: Timed out after 6 second(s)."}
    timed_out = {"event": "runner_on_failed", "event_data": {"res": res}}
    out, late = pair_job.side_of(timed_out, 6, "ex1")
    assert late and out.rc == 124
    assert out.stderr.startswith("pair probe timed out after 6s (the node held the session")
    unreachable = {"event": "runner_on_unreachable", "event_data": {"res": {"msg": "refused"}}}
    out, late = pair_job.side_of(unreachable, 6, "ex1")
    assert (out.rc, late) == (255, False)  # the pair failed, as a direct run's ssh failure
    assert out.stderr == "unreachable from executor ex1: refused"


# A node's `timeout LIMIT TOOL...` running gpuboot's TCP pair tool, on this machine. Who
# is who is in the words only: a pair with n2 has the tool limit of n2's pair deadline (40 s
# -> 35: SLOW), and the client whose server is a-n1 (n2, in the first round) hangs past
# its deadline when HANG is set.
SHIM = """#!{python}
import os, sys, time
limit, args = sys.argv[1], sys.argv[2:]
role = "server" if "server" in args else "client"
if role == "client" and args[args.index("client") + 1] == "a-n1" and {hang}:
    time.sleep(9)
gbits = 0.05 if limit == "35" else 9.0
print("gpuboot-tcpbw role=%s bytes=1 seconds=1.000 gbits_s=%.3f" % (role, gbits))
"""


def _bin(tmp_path: Path, hang: bool) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "timeout").write_text(SHIM.format(python=sys.executable, hang=hang))
    (bindir / "timeout").chmod(0o755)
    return bindir


def _entries(pair_timeouts: dict[str, int]) -> dict[str, dict]:
    profile = load_profile("l40s-pcie-4gpu")
    return {
        h: {
            "profile": profile,
            "hostvars": {"ansible_host": f"a-{h}"}
            | ({"gpuboot_pair_timeout": pair_timeouts[h]} if h in pair_timeouts else {}),
            "meta": {"probes": "quick"},
            "evidence": {},
        }
        for h in HOSTS
    }


def _deadlines(entries: dict) -> dict[str, float]:
    return {
        h: host_deadline(e["hostvars"], "gpuboot_pair_timeout", pairs.PAIR_DEADLINE_S)
        for h, e in entries.items()
    }


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("hang", "timeouts", "expected", "jobs"),
    [  # three rounds, then a re-test of each member of a failed pair with a known-good one
        (False, {"n2": 40}, {"n1": "good", "n2": "pinned", "n3": "good"}, 5),
        (True, {"n2": 6}, {"n1": "good", "n2": "unattributed", "n3": "good"}, 4),
    ],
    ids=["slow-node-pinned", "hung-side"],
)
def test_direct_and_executor_pair_probes_give_identical_verdicts(
    tmp_path, monkeypatch, hang, timeouts, expected, jobs
):
    monkeypatch.setattr(remote, "KILL_GRACE_S", 0.2)
    bindir = _bin(tmp_path, hang)
    direct = _entries(timeouts)
    deadlines = _deadlines(direct)
    runner = engine._pair_runner({h: ShellNode(bindir) for h in HOSTS}, deadlines)
    run_pair_probes(direct, runner, deadlines)
    relayed = _entries(timeouts)
    executor = local_supervisor(tmp_path, bindir)
    play = pair_job.rounds_on(executor, dict.fromkeys(HOSTS, LOCAL), deadlines, tmp_path / "run")
    run_pair_probes(relayed, deadlines=deadlines, play=play)
    verdicts = {h: e["meta"]["pairs"]["tcp_bw"][h] for h, e in relayed.items()}
    assert {h: v["status"] for h, v in verdicts.items()} == expected
    assert [e["meta"] for e in relayed.values()] == [e["meta"] for e in direct.values()]
    assert [e["evidence"] for e in relayed.values()] == [e["evidence"] for e in direct.values()]
    if hang:  # ERROR naming the phase; its partner n1 cleared by a re-test with n3
        assert "n2: pair probe timed out after 6s" in verdicts["n2"]["reason"]
        assert "retry with known-good n3 ok" in verdicts["n1"]["reason"]
    else:
        assert "retry with known-good" in verdicts["n2"]["reason"]
    shards = sorted(p.name for p in (tmp_path / "run" / "shards").iterdir())
    assert shards == [f"ex1-{i}" for i in range(1, jobs + 1)]  # one job a round
    assert not any((tmp_path / "run" / "shards").glob("*/private"))  # the jobs' data went


@pytest.mark.subprocess
def test_a_round_runs_as_one_job_each_server_started_before_its_client(tmp_path):
    marks = {h: tmp_path / f"listening-{h}" for h in ("n1", "n3")}
    connections = {h: LOCAL for h in ("n1", "n2", "n3", "n4")}
    play = pair_job.rounds_on(
        local_supervisor(tmp_path), connections, dict.fromkeys(connections, 60), tmp_path / "run"
    )
    sides = play(
        [
            (s, c, f"touch {marks[s]}; sleep 2; echo served; exit 3", f"cat {marks[s]} && echo hi")
            for s, c in (("n1", "n2"), ("n3", "n4"))
        ]
    )
    for srv, cli in sides:
        assert srv == (ProbeOutput("served\n", "", 3), False)
        assert cli == (ProbeOutput("hi\n", "", 0), False)  # its server was there first
    assert [p.name for p in (tmp_path / "run" / "shards").iterdir()] == ["ex1-1"]


@pytest.mark.subprocess
def test_a_server_whose_tool_cannot_start_fails_its_first_task_and_its_rc_is_kept(
    tmp_path, monkeypatch
):
    """Its directory is taken (mkdir fails: exit 97): the start task fails, no answer is
    waited for, and the side says the tool did not start, with the node's own words."""
    token = uuid.UUID(int=0x97)
    taken = Path(pair_job.SERVER_DIR.format(token=token.hex))
    taken.mkdir()
    monkeypatch.setattr(pair_job.uuid, "uuid4", lambda: token)
    try:
        play = pair_job.rounds_on(
            local_supervisor(tmp_path), {"n1": LOCAL, "n2": LOCAL}, {"n1": 30, "n2": 30},
            tmp_path / "run",
        )  # fmt: skip
        ((srv, _cli),) = play([("n1", "n2", "echo served", "echo hi")])
    finally:
        shutil.rmtree(taken, ignore_errors=True)
    assert srv[1] is False and srv[0].rc == 97
    assert srv[0].stderr.startswith("the pair tool did not start: mkdir")


def _collected(host: str, domain: str) -> tuple[NodeEvidence, tuple[dict, dict]]:
    entry = _entries({})[host]
    hostvars = {**entry["hostvars"], "gpuboot_domain": domain}
    found = NodeEvidence(host, {}, hostvars, entry["meta"], entry["profile"])
    return found, (LOCAL, hostvars)


@pytest.mark.subprocess
def test_a_lost_executor_mid_round_leaves_the_domain_not_judged(tmp_path):
    recorded = tmp_path / "cut"
    recorded.write_bytes(stream()[:200])  # the worker's first lines, then ssh's 255
    lost = python_channel("ex1", REPLAY, str(recorded), "255")
    collected = {h: _collected(h, "hall-a") for h in ("n1", "n2")}
    store = {h: found for h, (found, _c) in collected.items()}
    shard = Shard(lost, {h: members for h, (_f, members) in collected.items()})
    out = pair_job.pair_shards({"ex1": shard}, store, tmp_path / "run")
    assert sorted(out) == ["n1", "n2"]
    for host, why in out.items():
        assert isinstance(why, ExecutorLost)
        assert "executor ex1 lost during the pair probes" in why.message
        report = engine.judge(host, why)
        assert report.verdict == engine.UNKNOWN  # never certified, never taken out
        assert {f.status for f in report.findings} == {rules.ERROR}  # never FAIL


def test_a_node_alone_in_its_domain_has_no_partner_and_runs_no_job(tmp_path):
    found, members = _collected("n1", "hall-a")
    never = Executor("ex1", ("false",))  # a job would make the node not judged
    assert (
        pair_job.pair_shards({"ex1": Shard(never, {"n1": members})}, {"n1": found}, tmp_path) == {}
    )
    assert found.meta["pairs"]["tcp_bw"]["n1"]["status"] == "none"  # as a direct run says


@pytest.mark.subprocess
def test_a_servers_tool_outlives_the_tty_session_that_started_it(tmp_path):
    """raw runs over ssh with a tty, which hangs up when the start script ends: the tool
    started in the background keeps running and leaves its answer."""
    token = uuid.uuid4().hex
    where = Path(pair_job.SERVER_DIR.format(token=token))
    pid, master = pty.fork()
    if pid == 0:  # the session leader of the tty, as ssh's shell is
        os.execvp("sh", ["sh", "-c", pair_job.start_script(token, "sleep 1; echo served", 30)])
    try:
        while os.read(master, 1024):
            pass
    except OSError:  # the tty hung up: its session ended
        pass
    assert os.waitpid(pid, 0)[1] == 0
    try:
        ends = time.monotonic() + 30
        while not (where / "rc").exists() and time.monotonic() < ends:
            time.sleep(0.1)
        assert (where / "out").read_text() == "served\n"
        assert (where / "rc").read_text() == "0\n"
    finally:
        os.close(master)
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.subprocess
def test_a_servers_directory_goes_when_no_answer_task_takes_it(tmp_path):
    """The answer task timed out or the round was cancelled: the tool's directory is
    removed on the node once the round could no longer want it."""
    token = uuid.uuid4().hex
    where = Path(pair_job.SERVER_DIR.format(token=token))
    try:
        subprocess.run(["sh", "-c", pair_job.start_script(token, "echo served", 1)], check=True)
        ends = time.monotonic() + 30
        while where.exists() and time.monotonic() < ends:
            time.sleep(0.1)
        assert not where.exists()
    finally:
        shutil.rmtree(where, ignore_errors=True)
