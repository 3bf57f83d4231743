"""Progress pieces without a recording: natural host order, the host counts certify and
scan announce under --limit, a slow host, a failure a rescue block took, and the terminal
status row that is redrawn in place (never one row more)."""

from __future__ import annotations

import io
import re

import pytest

from gpuboot import cli, engine, transport
from gpuboot.cli.render import verdict_text
from gpuboot.progress import RESCUE_WAIT_S, SLOW_MIN_S, InstallProgress, Screen
from gpuboot.results import RunReport
from gpuboot.runner import EventFolder

PINS = (
    "gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_probes: none, "
    "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1"
)
REFUSED = "ssh: connect to host 192.0.2.9 port 22: Connection refused"


class Refused:
    def run(self, _command: str):
        raise RuntimeError(REFUSED)


@pytest.fixture
def inv(tmp_path, monkeypatch):
    """node1, node2, node10 (listed out of order); private run and home dirs."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    hosts = "".join(f"    node{i}: {{ansible_host: 192.0.2.{i}}}\n" for i in (10, 2, 1))
    path = tmp_path / "inv.yml"
    path.write_text(f"all:\n  vars: {{{PINS}}}\n  hosts:\n{hosts}")
    return path


def test_certify_judges_and_reports_hosts_in_natural_order(inv):
    report = engine.run(str(inv), transport=lambda _name, _vars: Refused())
    assert [n.host for n in report.nodes] == ["node1", "node2", "node10"]


@pytest.mark.parametrize("verb", ["certify", "scan"])
def test_certify_and_scan_count_the_hosts_of_their_limit(verb, inv, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(transport, "connect", lambda *_a: Refused())
    extra = ["--history", str(tmp_path / "h.jsonl")] if verb == "scan" else []
    code = cli.main([verb, "-i", str(inv), "--limit", "node2", *extra])
    err = capsys.readouterr().err
    assert code != 0  # the node could not be judged
    assert "1 host(s)" in err and "3 host(s)" not in err
    # the phases, each over the one host of the limit, and the host that could not be judged
    assert re.search(rf"{verb}: collecting evidence: 1/1 hosts done, 1 not judged", err)
    assert re.search(rf"{verb}: judging: 1/1 hosts done", err)
    assert re.search(r"node2 not judged: .*Connection refused", err)
    assert "node1" not in err and "node10" not in err


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _event(kind: str, host: str, task: str, **data) -> dict:
    return {"event": kind, "event_data": {"host": host, "task": task, "task_uuid": task, **data}}


def _install(clock: Clock) -> tuple[io.StringIO, InstallProgress, EventFolder]:
    out = io.StringIO()
    progress = InstallProgress(Screen(out, tty=False, clock=clock))
    progress.batch(1, 1, ["a", "b", "c"], 3)
    return out, progress, EventFolder(on_event=progress.event)


def test_a_host_far_slower_than_its_batch_gets_one_line(monkeypatch):
    clock = Clock()
    out, progress, fold = _install(clock)
    for host in "abc":
        fold(_event("runner_on_start", host, "DRV-010 | PATCH | Install"))
    clock.now += 10
    fold(_event("runner_on_ok", "a", "DRV-010 | PATCH | Install", res={"changed": True}))
    fold(_event("runner_on_ok", "b", "DRV-010 | PATCH | Install", res={"changed": True}))
    clock.now += SLOW_MIN_S - 11
    progress.tick()
    assert "slow" not in out.getvalue()  # not yet: under SLOW_MIN_S
    clock.now += 30
    progress.tick()
    progress.tick()
    slow = [line for line in out.getvalue().splitlines() if "slow" in line]
    assert len(slow) == 1
    assert re.search(
        r" c is slow: DRV-010 \| PATCH \| Install running for 59s; the others took 10s", slow[0]
    )


def test_a_failure_a_rescue_block_took_is_not_reported():
    clock = Clock()
    out, progress, fold = _install(clock)
    fold(_event("runner_on_start", "a", "FM-024 | PATCH | Start"))
    fold(_event("runner_on_failed", "a", "FM-024 | PATCH | Start", res={"msg": "timeout"}))
    clock.now += 1
    fold(_event("runner_on_start", "a", "FM-025 | AUDIT | Read why"))  # the rescue runs
    fold(_event("runner_on_start", "b", "FM-024 | PATCH | Start"))
    fold(_event("runner_on_failed", "b", "FM-024 | PATCH | Start", res={"msg": "timeout"}))
    clock.now += RESCUE_WAIT_S
    progress.tick()
    failed = [line for line in out.getvalue().splitlines() if "FAILED" in line]
    assert len(failed) == 1 and " b FAILED at FM-024 | PATCH | Start: timeout" in failed[0]


ROWS = 6


class Terminal:
    """Enough of a terminal to count rows: \\r, erase line, newline; a screen of ROWS rows
    whose top row scrolls into the history."""

    def __init__(self):
        self.history: list[str] = []
        self.screen = [""]
        self.bytes = 0

    def isatty(self) -> bool:
        return True

    def flush(self) -> None:
        pass

    def write(self, text: str) -> None:
        self.bytes += len(text.encode())
        for part in re.split(r"(\r|\x1b\[2K|\n)", text):
            if part == "\n":
                self.screen.append("")
                if len(self.screen) > ROWS:
                    self.history.append(self.screen.pop(0))
            elif part == "\x1b[2K":
                self.screen[-1] = ""
            elif part and part != "\r":
                assert "\x1b" not in part, part  # nothing else moves the cursor
                self.screen[-1] += part


def test_on_a_terminal_the_status_is_one_row_redrawn_in_place():
    clock = Clock()
    term = Terminal()
    progress = InstallProgress(Screen(term, clock=clock, columns=80))
    hosts = [f"node{i}" for i in range(1, 21)]
    progress.batch(1, 1, hosts, 20)
    fold = EventFolder(on_event=progress.event)
    for n in range(40):
        for host in hosts:
            clock.now += 0.05
            fold(_event("runner_on_start", host, f"T{n}"))
            fold(_event("runner_on_ok", host, f"T{n}", res={"changed": n % 2 == 0}))
    fold(_event("runner_on_unreachable", "node7", "T40", res={"msg": "no route"}))
    progress.close()
    assert term.history == []  # nothing scrolled away: 1 event line and the final status
    lines = [line for line in term.screen if line]
    assert lines[0] == "node7 UNREACHABLE at T40: no route"
    assert lines[1].startswith("install: 20/20 hosts done: 0 ok, 19 changed, 0 failed, 1 unr")
    assert all(len(line) < 80 for line in lines)
    assert term.bytes < 100 * 1024  # 1600 events: redraws at most every 0.2 s


def test_screen_rows_never_wrap_on_a_narrow_terminal():
    term = Terminal()
    screen = Screen(term, clock=Clock(), columns=30)
    screen.status("install: batch 1/2, 0/10 hosts done, 5 running: 0 ok, 0 changed")
    assert len(term.screen[-1]) == 29 and term.screen[-1].endswith("…")


def test_sort_hosts_is_natural_and_the_same_as_the_reports():
    from gpuboot.progress import sort_hosts
    from gpuboot.report._util import host_key
    from gpuboot.ui import host_ranges

    names = ["node10", "node2", "gpu-b", "node1", "n01", "node9"]
    assert sort_hosts(names) == sorted(names, key=host_key)
    assert sort_hosts(names) == ["gpu-b", "n01", "node1", "node2", "node9", "node10"]
    assert host_ranges(names) == "gpu-b, n01, node[1-2,9-10]"
    assert host_ranges(["node4"]) == "node4"


def test_install_table_folds_and_names_failures_first():
    from gpuboot.runner import HostResult
    from gpuboot.ui import host_table

    hosts = {f"node{i}": HostResult(f"node{i}", ok=40, changed=0) for i in range(1, 38)}
    hosts["node12"] = HostResult("node12", ok=3, failed=1, failed_task="DRV-016", reason="x")
    text = host_table(hosts).splitlines()
    assert text[2].split()[:3] == ["node12", "1", "FAILED"]
    assert text[3].split()[:6] == ["node[1-11,13-37]", "36", "ok", "40", "0", "0"]
    assert text[-1] == "37 hosts: 36 ok, 0 changed, 1 failed"


def test_install_text_fits_the_terminal_and_json_keeps_the_reason_whole(monkeypatch):
    from types import SimpleNamespace

    from gpuboot.cli.render import install_text
    from gpuboot.runner import HostResult

    reason = "dpkg: error processing package nvidia-dkms-550 " + "x" * 400
    hosts = {"node1": HostResult("node1", ok=3, failed=1, failed_task="DRV-016", reason=reason)}
    rollout = SimpleNamespace(
        hosts=["node1"], batch_size=1, stopped="", failed=[], pending=[], unknown=[]
    )
    result = SimpleNamespace(
        hosts=hosts, rollout=rollout, elapsed_s=1.0, run_dir="/r", drained={}, would_drain=[],
        diff=None,
    )  # fmt: skip
    monkeypatch.setenv("COLUMNS", "100")
    table = install_text(result, SimpleNamespace()).split("\n1 host(s)")[0]
    assert max(map(len, table.splitlines())) <= 100, table
    assert "…" in table and "node1" in table
    assert hosts["node1"].reason == reason  # the result (what --json prints) is untouched


def test_certify_table_puts_failures_first_and_folds_passing_nodes():
    def node(host: str, status: str) -> dict:
        finding = {"rule": "GPU-001", "title": "GPU count", "status": status, "reason": "r"}
        return {"host": host, "verdict": status, "findings": [finding]}

    nodes = [node(f"node{i}", "PASS") for i in range(1, 38)]
    nodes[11] = node("node12", "FAIL")
    nodes[29] = node("node30", "ERROR")
    rows = verdict_text(RunReport.from_dict({"nodes": nodes})).splitlines()[2:]
    assert [r.split()[:2] for r in rows[:3]] == [
        ["node12", "FAIL"],
        ["node30", "ERROR"],
        ["node[1-11,13-29,31-37]", "PASS"],
    ]
    assert rows[2].endswith("35 nodes: 1 checks passed")
    # then the one-line fleet summary, failing nodes first with their rule
    assert rows[3:] == ["37 nodes: 35 PASS, 1 FAIL, 1 ERROR — node12 GPU-001, node30 GPU-001"]


def test_a_host_whose_executor_was_lost_is_listed_with_its_reason_and_the_resume():
    from types import SimpleNamespace

    from gpuboot.cli.render import install_text
    from gpuboot.runner import HostResult

    hosts = {
        "node1": HostResult("node1", ok=5),
        "node2": HostResult("node2", unknown=True, reason="executor exec-a lost: stream cut"),
    }
    rollout = SimpleNamespace(
        hosts=["node1", "node2"], batch_size=2, stopped="", failed=[], pending=[],
        unknown=["node2"], check=False, settings={},
    )  # fmt: skip
    result = SimpleNamespace(
        hosts=hosts, rollout=rollout, elapsed_s=1.0, run_dir="/r", drained={}, would_drain=[],
        diff=None, run_id="20261127-1", resumed_from=None,
    )  # fmt: skip
    text = install_text(result, SimpleNamespace(inventory="inv.yml"))
    row = next(line for line in text.splitlines() if line.startswith("node2"))
    assert "UNKNOWN" in row and "executor exec-a lost" in row
    assert "2 hosts: 1 ok, 0 changed, 1 unknown" in text
    assert "once fixed: gpuboot install -i inv.yml --resume 20261127-1" in text
