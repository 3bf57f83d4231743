"""No node can stall a certify run: every phase that waits on a node or on its data has a
controller-side deadline, and a node past it is ERROR for that phase, naming the phase and
the deadline, while the others get their verdicts.

Unit level, through certify's engine with fake transports: a pair-probe client that never
returns, a node whose rules never finish, a node whose kernel log is one 63 MiB line (the
most a probe file may hold), a deadline variable that is not a number (exit 2); and
evaluate's judging of a large bundle, in workers ended at the same deadline."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuboot import certify, cli, engine, remote
from gpuboot.checks import rules
from gpuboot.errors import BadInput
from gpuboot.probes import tcpbw
from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # forks judging workers and runs local shells

PINS = (
    "gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_probes: quick, "
    "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1"
)
# either side's program, after the node-side `timeout N`
TCP_PROBE = tcpbw.server_command().removesuffix(f" server {tcpbw.PORT}").split(" ", 2)[2]
BUNDLES = REPO / "tests" / "fixtures" / "bundles"
RELEASE = threading.Event()  # set when a test ends: a hung fake lets go of its thread


@pytest.fixture(autouse=True)
def _release_hung_fakes():
    RELEASE.clear()
    yield
    RELEASE.set()


def inventory(tmp_path: Path, monkeypatch, n2_vars: str = "") -> Path:
    """Three hosts; n2 with ``n2_vars``; private run and home dirs."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(remote, "KILL_GRACE_S", 0.2)  # nothing of a fake to kill
    procfs = tmp_path / "proc"
    procfs.mkdir(exist_ok=True)
    path = tmp_path / "inv.yml"
    hosts = "".join(f"    n{i}: {{ansible_host: 192.0.2.{i}}}\n" for i in (1, 2, 3))
    if n2_vars:
        hosts = hosts.replace("192.0.2.2", f"192.0.2.2, {n2_vars}")
    path.write_text(f"all:\n  vars: {{{PINS}, gpuboot_procfs: {procfs}}}\n  hosts:\n{hosts}")
    return path


class Node:
    """A node whose shell is this machine's (the real collection script, run locally) and
    whose TCP pair probe answers at once; ``hang_client``: its pair-probe client never
    returns. ``path``: a directory of tools put first on its PATH."""

    def __init__(self, hang_client: bool = False, path: Path | None = None):
        self.hang_client, self.path = hang_client, path

    def run(self, command: str):
        if TCP_PROBE in command:
            role = "client" if " client " in command else "server"
            if role == "client" and self.hang_client:
                RELEASE.wait(600)
            line = f"gpuboot-tcpbw role={role} bytes=1 seconds=1.000 gbits_s=20.000\n"
            return SimpleNamespace(rc=0, stdout=line, stderr="")
        env = dict(os.environ)
        if self.path:
            env["PATH"] = f"{self.path}:{env['PATH']}"
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env)
        return SimpleNamespace(rc=out.returncode, stdout=out.stdout, stderr=out.stderr)


def transport(**special):
    return lambda name, _hostvars: special.get(name, Node())


def by_host(report) -> dict[str, dict]:
    return {n["host"]: n for n in report.to_dict()["nodes"]}


def judged(node: dict) -> bool:
    """Its rules ran, each with its own reason (unlike a node refused as a whole)."""
    return len({f["reason"] for f in node["findings"]}) > 1


def test_a_pair_probe_client_that_never_returns_is_error_and_the_run_finishes(
    tmp_path, monkeypatch
):
    inv = inventory(tmp_path, monkeypatch, "gpuboot_pair_timeout: 2")
    started = time.monotonic()
    report = engine.run(str(inv), transport=transport(n2=Node(hang_client=True)))
    assert time.monotonic() - started < 120
    nodes = by_host(report)
    assert sorted(nodes) == ["n1", "n2", "n3"] and all(judged(n) for n in nodes.values())
    tcp = {h: next(f for f in n["findings"] if f["rule"] == TCP_RULE) for h, n in nodes.items()}
    # ERROR, or SKIPPED behind this machine's missing nvidia-smi with the same reason: never
    # a hardware verdict
    assert tcp["n2"]["status"] in (rules.ERROR, rules.SKIPPED), tcp["n2"]
    assert "n2: pair probe timed out after 2s" in tcp["n2"]["reason"], tcp["n2"]
    for host in ("n1", "n3"):  # measured (n1 cleared by a re-test), never blamed for n2
        assert tcp[host]["status"] == rules.PASS, tcp[host]
    assert "retry with known-good n3 ok" in tcp["n1"]["reason"]


TCP_RULE = next(r.id for r in rules.RULES if "tcp_bw_*" in r.evidence)


def test_a_pairs_node_side_tools_end_within_the_shorter_deadline_of_its_hosts(
    tmp_path, monkeypatch
):
    """A partner of a hung node stops waiting for it when the controller does: n2's pairs
    run their tools under `timeout 5` (n2's 10 s less the ssh margin), n1-n3's under 60."""
    inv = inventory(tmp_path, monkeypatch, "gpuboot_pair_timeout: 10")
    seen: list[tuple[str, str]] = []

    class Recording(Node):
        def __init__(self, name: str):
            super().__init__()
            self.name = name

        def run(self, command: str):
            if TCP_PROBE in command:
                seen.append((self.name, command))
            return super().run(command)

    engine.run(str(inv), transport=lambda name, _hv: Recording(name))
    limits = {(host, re.search(r"timeout (\d+) ", cmd)[1]) for host, cmd in seen}
    assert limits == {("n1", "5"), ("n2", "5"), ("n3", "5"), ("n1", "60"), ("n3", "60")}, seen


def test_a_node_whose_judging_never_finishes_is_error_and_the_others_are_judged(
    tmp_path, monkeypatch
):
    inv = inventory(tmp_path, monkeypatch, "gpuboot_probes: none, gpuboot_judge_timeout: 2")
    evaluate = rules.evaluate

    def stalls_on_n2(evidence, ctx, *args):
        if ctx.host == "n2":
            time.sleep(600)  # in the judging worker: ended at the deadline
        return evaluate(evidence, ctx, *args)

    monkeypatch.setattr(rules, "evaluate", stalls_on_n2)
    started = time.monotonic()
    report = engine.run(str(inv), transport=transport())
    assert time.monotonic() - started < 120
    nodes = by_host(report)
    assert nodes["n2"]["verdict"] == rules.ERROR
    (reason,) = {f["reason"] for f in nodes["n2"]["findings"]}
    assert "judging did not finish within 2s" in reason, reason
    assert "gpuboot_judge_timeout" in reason
    assert judged(nodes["n1"]) and judged(nodes["n3"])


def test_a_kernel_log_of_one_63_mib_line_is_judged_within_the_deadline(tmp_path, monkeypatch):
    inv = inventory(tmp_path, monkeypatch, "gpuboot_probes: none")
    tools = tmp_path / "bin"
    tools.mkdir()
    dmesg = tools / "dmesg"  # one line, just under the 64 MiB a probe file may hold
    dmesg.write_text("#!/bin/sh\nhead -c 66060288 /dev/zero | tr '\\0' a\n")
    dmesg.chmod(dmesg.stat().st_mode | stat.S_IXUSR)
    started = time.monotonic()
    report = engine.run(str(inv), transport=transport(n2=Node(path=tools)))
    elapsed = time.monotonic() - started
    assert elapsed < engine.JUDGE_DEADLINE_S, elapsed
    nodes = by_host(report)
    assert all(judged(n) for n in nodes.values()), nodes["n2"]
    assert (report.bundle / "n2" / "dmesg.txt").stat().st_size == 66060288


def test_a_deadline_that_is_not_a_number_is_refused_before_any_host(tmp_path, monkeypatch):
    inv = inventory(tmp_path, monkeypatch, "gpuboot_pair_timeout: soon")
    touched = []

    def never(name, _hostvars):
        touched.append(name)
        return Node()

    with pytest.raises(BadInput) as caught:
        engine.run(str(inv), transport=never)
    assert caught.value.where == f"{inv}: n2: gpuboot_pair_timeout" and not touched
    assert caught.value.message.startswith("'soon' is not a deadline: a number of seconds")
    assert cli.main(["certify", "-i", str(inv), "--json"]) == 2


def test_evaluate_ends_a_hosts_judging_at_its_deadline(tmp_path, monkeypatch):
    source = next(p for p in sorted((BUNDLES / "real-h100-healthy").iterdir()) if p.is_dir())
    root = tmp_path / "bundle"
    for i in range(3):
        shutil.copytree(source, root / f"node{i}")
    monkeypatch.setattr(certify, "PARALLEL_FROM_HOSTS", 2)  # the worker path, on 2 cores
    monkeypatch.setattr(engine, "JUDGE_DEADLINE_S", 2)
    evaluate = rules.evaluate

    def stalls_on_node1(evidence, ctx, *args):
        if ctx.host == "node1":
            time.sleep(600)
        return evaluate(evidence, ctx, *args)

    monkeypatch.setattr(rules, "evaluate", stalls_on_node1)
    nodes = by_host(certify.evaluate_bundle(str(root), ignore_manifest=True))
    (reason,) = {f["reason"] for f in nodes["node1"]["findings"]}
    assert "judging did not finish within 2s" in reason, reason
    assert judged(nodes["node0"]) and judged(nodes["node2"])


def test_evaluate_judges_a_heavy_host_in_a_worker_ended_at_its_deadline(tmp_path, monkeypatch):
    """A small bundle is judged in process, unless a host holds more than a real capture
    does: its kernel log of one 63 MiB line is judged, and a host whose judging stalls is
    ended at the deadline while the others get their verdicts."""
    source = next(p for p in sorted((BUNDLES / "real-h100-healthy").iterdir()) if p.is_dir())
    root = tmp_path / "bundle"
    for i in range(3):
        shutil.copytree(source, root / f"node{i}")
    (root / "node1" / "dmesg.txt").write_text("a" * 66060288 + "\n")
    (root / "node2" / "dmesg.txt").write_text("a" * (certify.HEAVY_HOST_BYTES + 1))
    nodes = by_host(certify.evaluate_bundle(str(root), ignore_manifest=True))
    assert all(judged(n) for n in nodes.values())
    (root / "node1" / "dmesg.txt").unlink()  # judged in seconds: not within the 2 s below
    monkeypatch.setattr(engine, "JUDGE_DEADLINE_S", 2)
    evaluate = rules.evaluate

    def stalls_on_node2(evidence, ctx, *args):
        if ctx.host == "node2":
            time.sleep(600)
        return evaluate(evidence, ctx, *args)

    monkeypatch.setattr(rules, "evaluate", stalls_on_node2)
    nodes = by_host(certify.evaluate_bundle(str(root), ignore_manifest=True))
    (reason,) = {f["reason"] for f in nodes["node2"]["findings"]}
    assert "judging did not finish within 2s" in reason, reason
    assert judged(nodes["node0"]) and judged(nodes["node1"])
