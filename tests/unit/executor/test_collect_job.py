"""certify's collection through an executor (gpuboot.executor.collect_job): one judge.

The same emulated node is collected directly (a local shell, as certify's transport) and
through a local supervisor running collect.yml (ansible_connection: local); the verdicts,
every finding and the evidence are identical. An answer cut or altered on the way is
ERROR for its host, never FAIL or PASS; a host whose shard was lost is not judged.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuboot import engine
from gpuboot.checks import rules
from gpuboot.executor import collect_job
from gpuboot.executor.collect_job import AnswerCorrupted, ExecutorLost, unwrap, wrapped
from gpuboot.node_collect import NodeEvidence, collect_node
from gpuboot.remote import RemoteTimeout
from tests.unit.executor.conftest import (
    REPLAY,
    ShellNode,
    local_supervisor,
    python_channel,
    stream,
)
from tests.unit.gpuboot_lab._emu import GPUEMU

PROFILE = "hgx-h100-sxm-8gpu"
TOOLS = ("nvidia-smi", "dmesg", "lsmod", "ibstat", "mlnx_qos", "dcgmi", "lspci")


class _Recording:
    """A node that records the command collect_node sends it, and answers nothing."""

    sent: str = ""

    def run(self, command: str):
        self.sent = command.split("\n", 1)[1]  # run_with_deadline's token line off
        raise RuntimeError("recorded")


@pytest.mark.parametrize(
    "hostvars",
    [
        {},
        {"gpuboot_profile": PROFILE, "gpuboot_probes": "none"},
        {"gpuboot_profile": PROFILE, "gpuboot_probes": "quick", "doca_ofed_enabled": True},
        {"gpuboot_profile": PROFILE, "gpuboot_probes": "full", "gpuboot_os_family": "redhat"},
        {"gpuboot_profile": PROFILE, "nvidia_mig_layout": {}, "gpuboot_procfs": "/p"},
        {"gpuboot_reboot_boot_time_command": "uptime -s", "gpuboot_sysfs": "/s"},
    ],
)
def test_plan_sends_the_command_a_direct_collection_sends(hostvars):
    node = _Recording()
    with pytest.raises(Exception, match="recorded"):
        collect_node("n1", node, hostvars)
    assert collect_job.plan(hostvars, None).script == node.sent


def _answer(body: str, rc: int = 0, size: int | None = None, digest: str | None = None) -> str:
    raw = body.encode()
    size = len(raw) if size is None else size
    digest = digest or hashlib.sha256(raw).hexdigest()
    end = f"gpuboot-collect-end {rc} {size} {digest}"
    return f"noise on stderr\ngpuboot-collect-begin\n{body}\n{end}\n"


def test_unwrap_returns_the_body_and_its_exit_code():
    assert unwrap(_answer("QUJD", rc=3)) == (3, "QUJD")
    assert unwrap(_answer("QUJD").replace("\n", "\r\n")) == (0, "QUJD")  # ssh's tty
    assert unwrap(_answer("QUJD") + "bye from .bash_logout\n") == (0, "QUJD")


@pytest.mark.parametrize(
    "answer",
    [
        _answer("QUJD")[:-40],  # cut in its end line
        _answer("QUJD").replace("gpuboot-collect-begin\n", ""),  # its start lost
        _answer("QUJD").replace("QUJD", "QUJ"),  # cut in its body
        _answer("QUJD").replace("QUJD", "QUJE"),  # altered on the way
        _answer("QUJD", size=5),
        "",
    ],
    ids=["end-cut", "begin-lost", "body-cut", "altered", "size", "empty"],
)
def test_a_cut_or_altered_answer_is_error_never_a_verdict(answer):
    with pytest.raises(AnswerCorrupted):
        unwrap(answer)
    event = {"event": "runner_on_ok", "event_data": {"res": {"stdout": answer, "rc": 0}}}
    outcome = collect_job._outcome("n1", event, collect_job.plan({}, None), {}, None, "ex1")
    assert isinstance(outcome, AnswerCorrupted)
    report = engine.judge("n1", outcome)
    assert report.verdict == rules.ERROR
    assert {f.status for f in report.findings} == {rules.ERROR}


@pytest.mark.subprocess
def test_the_wrapped_command_answers_its_stdout_and_exit_code():
    command = "printf 'QUJD'; echo oops >&2; exit 3"
    out = subprocess.run(["sh", "-c", wrapped(command)], capture_output=True, text=True)
    assert out.returncode == 0
    assert unwrap(out.stdout) == (3, "QUJD")
    assert out.stderr == "oops\n"


# Each tool answers a given command line once from the emulator, then the same bytes again
# (its live sensors would differ between two runs): both runs judge one node state.
SHIM = """#!/bin/sh
c={cache}/{tool}-$(printf '%s ' "$@" | sha256sum | cut -c1-16)
if [ ! -e "$c.rc" ]; then
  GPUEMU_ROOT={root} {python} {gpuemu} {tool} "$@" >"$c.out" 2>"$c.err"; echo $? >"$c.rc"
fi
cat "$c.out"; cat "$c.err" >&2; exit "$(cat "$c.rc")"
"""


def _emulated(tmp_path: Path) -> tuple[dict, Path]:
    """An emulated node's variables and the bin dir of its tools (as the lab's packages)."""
    from tests.unit.checks._emunode import STACK_VARS, full_node

    node = full_node(tmp_path)
    node.run("ctl", "fault", "add", "xid", "79", "2", check=True)  # a verdict worth comparing
    bindir, cache = tmp_path / "bin", tmp_path / "answers"
    bindir.mkdir()
    cache.mkdir()
    for tool in TOOLS:
        shim = SHIM.format(
            cache=cache, tool=tool, root=node.root, python=sys.executable, gpuemu=GPUEMU
        )
        (bindir / tool).write_text(shim)
        (bindir / tool).chmod(0o755)
    sysroot = node.root / "run" / "gpuemu"
    hostvars = {
        **STACK_VARS,
        "gpuboot_profile": PROFILE,
        "gpuboot_probes": "none",
        "gpuboot_procfs": str(sysroot / "proc"),
        "gpuboot_sysfs": str(sysroot / "sys"),
    }
    return hostvars, bindir


LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def _direct_and_relayed(tmp_path: Path, hostvars: dict, bindir: Path):
    """The node's collection directly, and through a local supervisor."""
    direct = collect_node("n1", ShellNode(bindir), hostvars)
    stored = collect_job.collect_on(
        local_supervisor(tmp_path, bindir), {"n1": (LOCAL, hostvars)}, None, tmp_path / "shard"
    )
    return direct, stored["n1"]


@pytest.mark.subprocess
def test_direct_and_executor_collection_give_identical_verdicts(tmp_path):
    hostvars, bindir = _emulated(tmp_path)
    direct, relayed = _direct_and_relayed(tmp_path, hostvars, bindir)
    assert isinstance(relayed, NodeEvidence), relayed
    assert relayed.evidence == direct.evidence
    timing = ("collected_at", "collect_s")  # the executor's measure of its own run
    assert {k: v for k, v in relayed.meta.items() if k not in timing} == {
        k: v for k, v in direct.meta.items() if k not in timing
    }
    assert relayed.meta["collect_s"] > 0.1  # the node's run, not the hand-over of its answer
    judged = engine.judge("n1", direct).to_dict()
    assert engine.judge("n1", relayed).to_dict() == judged
    assert judged["verdict"] == rules.FAIL  # the XID is seen by both
    assert not (tmp_path / "shard" / "private").exists()  # the job's data went with it
    answer = _answer_res(tmp_path / "shard")
    assert set(answer) >= {"rc", "stdout", "stderr"}
    assert not {"stdout_lines", "stderr_lines"} & set(answer)  # the answer once, not twice


def _answer_res(shard: Path) -> dict:
    """The collection task's result as the shard's journal keeps its event."""
    records = [json.loads(line) for line in (shard / "journal.jsonl").read_text().splitlines()]
    (res,) = [
        r["d"]["event_data"]["res"]
        for r in records
        if r["k"] == "event"
        and r["d"]["event"] in collect_job.ANSWERED
        and r["d"]["event_data"].get("task") == collect_job.TASK
    ]
    return res


@pytest.mark.subprocess
def test_the_hosts_deadline_bounds_its_collection_on_the_executor(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dmesg").write_text("#!/bin/sh\nexec sleep 120\n")  # a tool stuck
    (bindir / "dmesg").chmod(0o755)
    started = time.monotonic()
    stored = collect_job.collect_on(
        local_supervisor(tmp_path, bindir),
        {"n1": (LOCAL, {"gpuboot_collect_timeout": 3})},
        None,
        tmp_path / "shard",
    )
    assert isinstance(stored["n1"], RemoteTimeout), stored["n1"]
    assert "timed out after 3s on executor ex1" in str(stored["n1"])
    assert time.monotonic() - started < 60


@pytest.mark.subprocess
def test_a_host_whose_shard_was_lost_is_not_judged(tmp_path):
    cut = stream()[:200]  # the worker's first lines, then nothing: a stream cut short
    recorded = tmp_path / "cut"
    recorded.write_bytes(cut)
    executor = python_channel("ex1", REPLAY, str(recorded), "255")
    stored = collect_job.collect_on(executor, {"n1": (LOCAL, {})}, None, tmp_path / "shard")
    assert isinstance(stored["n1"], ExecutorLost)
    assert "not judged: executor ex1 lost" in str(stored["n1"])


@pytest.mark.subprocess
def test_an_answer_past_ansible_runners_event_limit_arrives_whole(tmp_path):
    # the callback empties a task result past 700,000 characters: a node with quick probes'
    # outputs answers more than that, and would arrive as nothing. Its log here is what gzip
    # cannot shrink (the same bytes on every run: the direct and relayed runs compare it).
    hostvars, bindir = _emulated(tmp_path)
    (bindir / "dmesg").rename(bindir / "dmesg.emulated")
    noise = (
        "import base64, random; random.seed(1); "
        "print(base64.b64encode(random.randbytes(600000)).decode())"
    )
    (bindir / "dmesg").write_text(
        '#!/bin/sh\n"$(dirname "$0")/dmesg.emulated" "$@"; rc=$?\n'
        f"{sys.executable} -c {shlex.quote(noise)}\nexit $rc\n"
    )
    (bindir / "dmesg").chmod(0o755)
    direct, relayed = _direct_and_relayed(tmp_path, hostvars, bindir)
    assert isinstance(relayed, NodeEvidence), relayed
    assert relayed.evidence == direct.evidence
    assert len(_answer_res(tmp_path / "shard")["stdout"]) > 700_000
