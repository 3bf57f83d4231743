"""certify's engine (gpuboot/engine.py) without podman or ssh: each node's transport is a
fake that runs the collection script in a local shell, or fails the way a node can
(ssh refused, a hostile answer, no answer before the deadline, Ctrl-C).

One broken node never stops the others; whatever it was, it is ERROR with one short
reason and nothing of it lands in the bundle; the inventory is read once per run."""

from __future__ import annotations

import base64
import gzip
import io
import json
import stat
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuboot import certify, cli, engine, inventory, remote, transport
from gpuboot.bundle.names import MANIFEST, META
from gpuboot.checks import rules

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

PINS = (
    "gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_probes: none, "
    "nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1"
)
REFUSED = "ssh: connect to host 192.0.2.2 port 22: Connection refused"


@pytest.fixture
def inv(tmp_path, monkeypatch) -> Path:
    """Three hosts (n2 with a 3 s collection deadline); private run and home dirs."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setattr(remote, "KILL_GRACE_S", 0.2)  # nothing of a fake to kill
    procfs = tmp_path / "proc"  # the probes read this node's /proc here
    procfs.mkdir()
    path = tmp_path / "inv.yml"
    hosts = "".join(f"    n{i}: {{ansible_host: 192.0.2.{i}}}\n" for i in (1, 2, 3))
    hosts = hosts.replace("192.0.2.2", "192.0.2.2, gpuboot_collect_timeout: 3")
    path.write_text(f"all:\n  vars: {{{PINS}, gpuboot_procfs: {procfs}}}\n  hosts:\n{hosts}")
    return path


class Local:
    """A node whose shell is this machine's: the real collection script, run locally."""

    def run(self, command: str):
        out = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
        return SimpleNamespace(rc=out.returncode, stdout=out.stdout, stderr=out.stderr)


class Failing:
    def __init__(self, exc: BaseException):
        self.exc = exc

    def run(self, _command: str):
        raise self.exc


class Answering:
    def __init__(self, stdout: str):
        self.stdout = stdout

    def run(self, _command: str):
        return SimpleNamespace(rc=0, stdout=self.stdout, stderr="")


class Silent:
    """Holds the session until the test ends (a tool stuck in the kernel, a hostile node)."""

    def __init__(self):
        self.released = threading.Event()

    def run(self, _command: str):
        self.released.wait(30)
        return SimpleNamespace(rc=0, stdout="", stderr="")


def fake(**special):
    """A transport: the named hosts' fakes, every other host Local."""
    return lambda name, _hostvars: special.get(name, Local())


def by_host(report: engine.RunReport) -> dict[str, dict]:
    return {n["host"]: n for n in report.to_dict()["nodes"]}


def reasons(node: dict) -> set[str]:
    return {f["reason"] for f in node["findings"]}


def judged(node: dict) -> bool:
    """Its rules ran, each with its own reason (unlike a node refused as a whole)."""
    return len(reasons(node)) > 1


def assert_others_judged(report: engine.RunReport, broken: str) -> None:
    nodes = by_host(report)
    assert sorted(nodes) == ["n1", "n2", "n3"]
    for host in set(nodes) - {broken}:
        assert judged(nodes[host]), nodes[host]
        assert (report.bundle / host / META).is_file()


def test_a_node_whose_collection_raises_is_error_and_the_others_are_judged(inv):
    ssh_failed = RuntimeError(REFUSED)
    report = engine.run(str(inv), transport=fake(n2=Failing(ssh_failed)))
    n2 = by_host(report)["n2"]
    assert n2["verdict"] == rules.ERROR and len(n2["findings"]) == len(rules.RULES)
    (reason,) = reasons(n2)  # one short reason on every finding
    assert reason == f"cannot judge: n2: unreachable: {REFUSED}"
    assert_others_judged(report, "n2")
    assert not (report.bundle / "n2").exists()


def _tar(*members: tuple[str, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(gzip.compress(buf.getvalue())).decode()  # as the node's answer


def test_a_hostile_answer_is_error_and_nothing_of_it_is_written(inv, tmp_path):
    escaped = tmp_path / "escaped.txt"
    climb = "../" * 12 + str(escaped).lstrip("/")
    hostile = _tar(("dmesg.txt", b"kernel log\n"), (climb, b"written by a node\n"))
    report = engine.run(str(inv), transport=fake(n2=Answering(hostile)))
    n2 = by_host(report)["n2"]
    assert n2["verdict"] == rules.ERROR
    (reason,) = reasons(n2)
    assert "collection answer rejected" in reason and "nothing of it was written" in reason
    assert not escaped.exists() and not (report.bundle / "n2").exists()
    assert_others_judged(report, "n2")


def test_a_node_past_its_deadline_is_error_and_the_others_are_judged(inv):
    silent = Silent()
    try:
        report = engine.run(str(inv), transport=fake(n2=silent))
    finally:
        silent.released.set()
    n2 = by_host(report)["n2"]
    assert n2["verdict"] == rules.ERROR
    (reason,) = reasons(n2)
    assert "evidence collection timed out after 3s" in reason, reason
    assert_others_judged(report, "n2")


def test_the_bundle_and_its_manifest_are_written_and_private(inv):
    report = engine.run(str(inv), transport=fake(n3=Failing(RuntimeError(REFUSED))))
    bundle = report.bundle
    manifest = json.loads((bundle / MANIFEST).read_text())
    assert manifest["run_id"] == report.run_id
    assert manifest["hosts"] == {n.host: n.verdict for n in report.nodes}
    assert manifest["hosts"]["n3"] == rules.ERROR
    kept = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(manifest["files"]) == kept and f"n1/{META}" in kept and f"n2/{META}" in kept
    for d in (report.run_dir, bundle, bundle / "n1", bundle / "n2"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in bundle.rglob("*"):
        if f.is_file():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_the_inventory_is_read_once_per_run(inv, monkeypatch):
    """Ansible's inventory parse is the one read (load_inventory's); nothing re-reads the
    inventory for its hosts' variables (testinfra's ansible-inventory --list is not run)."""
    real = inventory._ansible_hosts
    reads = []

    def counted(path):
        reads.append(path)
        return real(path)

    def no_second_reader(*_a, **_k):
        raise AssertionError("the inventory was read again for testinfra")

    monkeypatch.setattr(inventory, "_ansible_hosts", counted)
    monkeypatch.setattr("testinfra.utils.ansible_runner.get_ansible_inventory", no_second_reader)
    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Local())
    certify.certify(str(inv))
    assert len(reads) == 1
    certify.certify(str(inv), limit="n1:n3")  # --limit, read by Ansible's own pattern rules
    assert len(reads) == 2


def test_ctrl_c_ends_the_run_with_exit_130(inv, monkeypatch, capsys):
    with pytest.raises(KeyboardInterrupt, match="certify stopped before a verdict"):
        engine.run(str(inv), transport=fake(n2=Failing(KeyboardInterrupt())))
    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Failing(KeyboardInterrupt()))
    assert cli.main(["certify", "-i", str(inv), "--json"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_the_report_keeps_certify_json_shape(inv, monkeypatch):
    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Local())
    report = certify.certify(str(inv), probes="none").to_dict()  # the JSON it keeps
    assert list(report) == [
        "run_id",
        "run_dir",
        "bundle",
        "elapsed_s",
        "controller_cpu_s",
        "passed",
        "probes",
        "nodes",
    ]
    assert list(report["controller_cpu_s"]) == list(engine.CPU_PHASES)
    assert report["probes"] == "none" and report["passed"] is False  # no GPU here
    assert [n["host"] for n in report["nodes"]] == ["n1", "n2", "n3"]
    for node in report["nodes"]:
        assert list(node) == ["host", "verdict", "findings", "measurements", "executor"]
        assert node["executor"] == "controller"
        assert {f["rule"] for f in node["findings"]} == set(rules.RULES_BY_ID)
        assert set(node["findings"][0]) == {
            "rule",
            "title",
            "status",
            "reason",
            "action",
            "severity",
            "applicable",
        }
    kept = Path(report["run_dir"]) / "report.json"
    assert json.loads(kept.read_text()) == report
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600  # the run's records are the operator's


def test_the_transport_is_built_from_the_checked_inventory(tmp_path):
    """ssh: testinfra's ssh backend with the inventory's address, user, port, key and ssh
    options; paramiko: Ansible's own connection (it checks host keys)."""
    hostvars = {
        "ansible_host": "10.0.0.5",
        "ansible_user": "ops",
        "ansible_port": 2222,
        "ansible_ssh_private_key_file": "/keys/id",
        "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes",
    }
    host = transport.connect("gpu1", hostvars, tmp_path / "inv.yml")
    b = host.backend
    assert b.NAME == "ssh"
    assert (b.host.name, b.host.user, b.host.port) == ("10.0.0.5", "ops", "2222")
    assert b.ssh_identity_file == "/keys/id"
    assert b.options.words == ("-o", "StrictHostKeyChecking=yes")
    para = transport.connect("gpu1", {**hostvars, "ansible_connection": "paramiko"}, tmp_path)
    assert para.backend.NAME == "ansible" and para.backend.force_ansible is True


def test_scan_judges_through_the_engine_on_an_inventory_already_loaded(inv, monkeypatch):
    """A caller that loaded the inventory (to hold its hosts, say) hands it on: the scan
    reads it no more, and its history names the inventory file."""
    from gpuboot import scan

    loaded = inventory.load_inventory(str(inv))
    monkeypatch.setattr(inventory, "_ansible_hosts", lambda *_a: pytest.fail("read again"))
    monkeypatch.setattr(transport, "connect", lambda *_a, **_k: Local())
    history = inv.parent / "history.jsonl"
    report = scan.scan(loaded, history=history).report
    assert [n.host for n in report.nodes] == ["n1", "n2", "n3"]
    records = [json.loads(line) for line in history.read_text().splitlines()]
    assert {r["inventory"] for r in records} == {str(inv)}
    assert {r["host"] for r in records} == {"n1", "n2", "n3"}
    # a scan's run is a scan: its own kind in runs list, retention and status
    assert "-scan-" in report.run_id and report.run_dir.name == report.run_id
    assert {r["run_id"] for r in records} == {report.run_id}


class Spinning(Local):
    """A node whose answer costs the controller CPU while it is collected (as ssh's key
    exchange and a stream's reading do)."""

    def run(self, command: str):
        ends = time.process_time() + 0.3
        while time.process_time() < ends:
            pass
        return super().run(command)


def test_the_controllers_cpu_is_told_by_phase_reaching_the_nodes_apart(inv):
    report = engine.run(str(inv), transport=fake(n2=Spinning()))
    cpu = report.controller_cpu_s
    assert set(cpu) == set(engine.CPU_PHASES) and all(v >= 0 for v in cpu.values())
    assert cpu["reach"] >= 0.3  # the collection's CPU, not the judging's
    assert cpu["judge"] < cpu["reach"]
    back = engine.RunReport.from_dict(report.to_dict())
    assert back.controller_cpu_s == cpu


def test_a_node_judged_without_its_evidence_observes_nothing(inv):
    """A scan reads a node's boot, faults and counters where its rules ran; a node that
    never got there (unreachable, or late) observes an empty evidence, so nothing parses
    its files again outside the judging deadline."""
    seen = engine.run(
        str(inv),
        transport=fake(n2=Failing(RuntimeError("ssh: connection refused"))),
        observe=lambda evidence, report: (report.host, sorted(evidence)),
    )
    observed = {n.host: n.observed for n in seen.nodes}
    assert observed["n2"] == ("n2", [])
    assert observed["n1"][0] == "n1" and observed["n1"][1]  # its evidence, read in the worker
