"""A fleet in halls: 2 halls x (1 executor + 3 nodes), each hall a network the controller
cannot reach. Everything that touches a hall node goes through its hall's executor, set up
by `gpuboot executor setup`: install (an executor killed mid-way leaves its hosts unknown,
exit 8, and --resume finishes only those), certify and scan (verdicts as the emulated
hardware gives, host by host), a paused executor (the controller does not hang), a skewed
one (refused before any host, exit 2), and a secret in the executors' environment that
never reaches the controller's run directories. The tests run in file order on one lab."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from gpuboot import paths
from gpuboot.executor.versions import local_versions
from gpuboot_lab import lab as labmod
from gpuboot_lab.podman import podman

from .conftest import ssh

pytestmark = pytest.mark.lab
HALL_A, HALL_B = "hall-a", "hall-b"
SENTINEL = f"gpuboot-sentinel-{uuid.uuid4().hex}"
RUN_DIRS: list[Path] = []  # every run of this module: none may hold the sentinel


@pytest.fixture(scope="module")
def halls():
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (run `make setup`)")
    name = f"t{os.getpid() % 10000}-{uuid.uuid4().hex[:6]}"
    try:
        lab = labmod.up(name, 6, "hgx-h100-sxm-8gpu", halls=2)
        for hall in lab.halls:  # pam_env gives every ssh session on the executor this
            podman(
                "exec",
                hall.executor_container_id,
                "sh",
                "-c",
                f"echo GPUBOOT_TEST_SECRET={SENTINEL} >> /etc/environment",
            )
        yield lab
    finally:
        if name in labmod.names():
            labmod.down(name)


def _gpuboot(*args: str, timeout: float = 900) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    if doc.get("run_dir"):
        RUN_DIRS.append(Path(doc["run_dir"]))
    return proc.returncode, doc, proc.stderr


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuboot.cli", *args, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=timeout)
    doc = json.loads(out) if out.strip().startswith("{") else {}
    if doc.get("run_dir"):
        RUN_DIRS.append(Path(doc["run_dir"]))
    return proc.returncode, doc, err


def _when_playing(lab: labmod.Lab, domain: str, proc: subprocess.Popen) -> None:
    """Return once ansible-playbook runs on the hall's executor (the shard is under way)."""
    executor = lab.hall(domain).executor_container_id
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        found = podman("exec", executor, "pgrep", "-f", "ansible-playbook", check=False)
        if found.returncode == 0:
            return
        time.sleep(0.2)
    _out, err = proc.communicate()
    pytest.fail(f"no play started on {domain}'s executor (exit {proc.returncode}):\n{err}")


def _pause(container: str) -> None:
    """podman pause; runc's cgroup v1 freezer may find a task it cannot freeze at once
    ("unable to freeze") and gives up: ask again, a few times."""
    for _ in range(5):
        if podman("pause", container, check=False).returncode == 0:
            return
    podman("pause", container)


def _logins(hall) -> int:
    """ssh connections the hall's executor has accepted so far (its sshd's journal)."""
    log = podman("exec", hall.executor_container_id, "journalctl", "-q", "-t", "sshd", "-o", "cat")
    return sum(line.startswith("Accepted publickey") for line in log.stdout.splitlines())


def _masters_left() -> list[str]:
    """ssh masters of a verb's shared connections still running (their title names the
    socket under GPUBOOT_HOME/ssh)."""
    prefix = f"ssh: {paths.home() / 'ssh'}/".encode()
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(prefix):
                left.append(proc.name)
        except OSError:  # ended meanwhile
            continue
    return left


def _hall_nodes(lab: labmod.Lab, domain: str) -> list[str]:
    return [n.name for n in lab.nodes if n.domain == domain]


def _executor_of(lab: labmod.Lab, node: str) -> str:
    return lab.hall(lab.node(node).domain).executor


def test_a_hall_node_is_out_of_the_controllers_reach_and_in_its_executors(halls):
    hall_nets = [ipaddress.ip_network(h.subnet) for h in halls.halls]
    shown = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True).stdout)
    mine = [
        ipaddress.ip_address(a["local"])
        for link in shown
        for a in link.get("addr_info", ())
        if a.get("family") == "inet"
    ]
    assert not [a for a in mine if any(a in net for net in hall_nets)], mine
    proc = ssh(halls, "node1", "true")  # the lab's key and host keys: only reach is missing
    assert proc.returncode == 255, proc.stdout + proc.stderr
    # the executor of its hall reaches it (sshd answers there)
    banner = podman(
        "exec",
        halls.hall(HALL_A).executor_container_id,
        "python3",
        "-c",
        "import socket,sys; s=socket.create_connection((sys.argv[1],22),5); print(s.recv(4))",
        halls.node("node1").ip,
    )
    assert "SSH-" in banner.stdout


def _setup(lab: labmod.Lab) -> dict:
    rc, doc, err = _gpuboot("executor", "setup", "-i", str(lab.inventory))
    assert rc == 0, err
    assert set(doc["executors"]) == {h.executor for h in lab.halls}
    for name, entry in doc["executors"].items():
        assert entry["versions"] == local_versions(), (name, entry)
    return doc


# A job whose supervisor was killed outright: its data (the stream's secrets) is left.
DEAD_JOB = "/root/.local/share/gpuboot/executor/deadjob0/data"


def test_executor_setup_installs_its_versions_and_dead_job_timer_a_second_run_changes_nothing(
    halls,
):
    first = _setup(halls)
    assert {e["status"] for e in first["executors"].values()} == {"changed"}
    executor = halls.hall(HALL_A).executor_container_id
    timer = podman("exec", executor, "systemctl", "is-active", "gpuboot-executor-gc.timer")
    assert timer.stdout.strip() == "active"
    podman("exec", executor, "mkdir", "-p", DEAD_JOB)
    podman("exec", executor, "systemctl", "start", "gpuboot-executor-gc.service")
    assert podman("exec", executor, "test", "-e", DEAD_JOB, check=False).returncode == 1
    # A second run from the same wheelhouse. The key covers the controller's gpuboot
    # tree: an edit made meanwhile (a shared working tree) is a new wheelhouse, rightly
    # installed again; then the run after it is the second one.
    for _ in range(3):
        second = _setup(halls)
        if second["wheelhouse"]["key"] == first["wheelhouse"]["key"]:
            break
        first = second
    else:
        pytest.fail("the controller's gpuboot tree changed before every second run")
    outcome = {n: (e["status"], e["changes"]) for n, e in second["executors"].items()}
    assert outcome == dict.fromkeys(first["executors"], ("ok", []))


def test_a_killed_executor_leaves_its_hosts_unknown_and_resume_finishes_only_those(halls):
    inventory = str(halls.inventory)
    proc = _start("install", "-i", inventory)
    _when_playing(halls, HALL_A, proc)
    killed_at = time.monotonic()
    podman("kill", halls.hall(HALL_A).executor_container_id)
    rc, doc, err = _finish(proc, timeout=600)
    assert rc == 8, err
    hosts = doc["hosts"]
    unknown = {h for h, r in hosts.items() if r["status"] == "unknown"}
    assert unknown and unknown <= set(_hall_nodes(halls, HALL_A)), hosts
    for host in _hall_nodes(halls, HALL_B):
        assert hosts[host]["status"] == "changed", hosts[host]
    assert all(r["executor"] == _executor_of(halls, h) for h, r in hosts.items()), hosts
    print(f"lost shard reported {time.monotonic() - killed_at:.0f} s after the kill")

    podman("start", halls.hall(HALL_A).executor_container_id)
    labmod.wait_for_ssh(halls, [], timeout=120)
    rc, resumed, err = _gpuboot("install", "-i", inventory, "--resume")
    assert rc == 0, err
    assert set(resumed["hosts"]) == unknown, resumed["hosts"]
    assert all(r["status"] in ("ok", "changed") for r in resumed["hosts"].values())

    rc, again, err = _gpuboot("install", "-i", inventory)
    assert rc == 0, (err, again.get("hosts"))
    assert {h: (r["status"], r["changed"]) for h, r in again["hosts"].items()} == {
        n.name: ("ok", 0) for n in halls.nodes
    }
    assert all(r["executor"] == _executor_of(halls, h) for h, r in again["hosts"].items())


def test_a_skewed_executor_is_refused_before_any_host_and_setup_repairs_it(halls):
    executor = halls.hall(HALL_A)
    podman(
        "exec",
        executor.executor_container_id,
        "sh",
        "-c",
        "sed -i 's/^Version: .*/Version: 0.0.0+skew/' "
        "/opt/gpuboot/venv/lib/python3*/site-packages/gpuboot-*.dist-info/METADATA",
    )
    rc, doc, err = _gpuboot("install", "-i", str(halls.inventory))
    assert rc == 2, err
    assert executor.executor in err and "0.0.0+skew" in err, err
    assert not doc.get("hosts"), doc
    setup = _setup(halls)  # every executor back at the controller's versions
    assert setup["executors"][executor.executor]["status"] == "changed"


def test_a_paused_executor_does_not_hang_the_controller(halls, tmp_path):
    executor = halls.hall(HALL_B).executor_container_id
    # a history of its own: the breaker reads no other run's scans
    proc = _start("scan", "-i", str(halls.inventory), "--history", str(tmp_path / "h.jsonl"))
    try:
        _when_playing(halls, HALL_B, proc)
        _pause(executor)
        paused_at = time.monotonic()
        try:
            rc, doc, err = _finish(proc, timeout=300)
        finally:
            podman("unpause", executor)
    finally:
        if proc.poll() is None:  # the next tests need its host locks
            proc.kill()
            proc.wait()
    waited = time.monotonic() - paused_at
    assert rc == 8, err
    verdicts = {n["host"]: n for n in doc["nodes"]}
    for host in _hall_nodes(halls, HALL_B):
        assert verdicts[host]["verdict"] == "UNKNOWN", verdicts[host]
    for host in _hall_nodes(halls, HALL_A):
        assert verdicts[host]["verdict"] == "PASS", verdicts[host]
    print(f"the scan ended {waited:.0f} s after the pause")


def test_certify_and_scan_through_executors_judge_each_node_as_its_hardware_is(halls, tmp_path):
    # One node (hall-b's) falls off the bus; the other hall's stay healthy. One only: the
    # same fault on nodes of one scan is a correlated failure, the breaker's (exit 6).
    labmod.emulator_ctl(halls.name, "node5", "fault", "add", "xid", "79")
    faulty = {"node5"}
    for verb in (("certify", "--probes", "none"), ("scan", "--history", str(tmp_path / "h.jsonl"))):
        before = {h.domain: _logins(h) for h in halls.halls}
        rc, doc, err = _gpuboot(*verb, "-i", str(halls.inventory))
        assert rc == 1, err
        # the pre-flight, the job and its release share one ssh connection per executor,
        # and the verb leaves no master behind
        assert {h.domain: _logins(h) - before[h.domain] for h in halls.halls} == {
            HALL_A: 1,
            HALL_B: 1,
        }, verb
        assert not _masters_left(), verb
        nodes = {n["host"]: n for n in doc["nodes"]}
        assert set(nodes) == {n.name for n in halls.nodes}
        for host, node in nodes.items():
            assert node["executor"] == _executor_of(halls, host), (verb, node)
            failing = {f["rule"] for f in node["findings"] if f["status"] == "FAIL"}
            if host in faulty:
                assert node["verdict"] == "FAIL" and "XID-001" in failing, (verb, host, failing)
            else:
                assert node["verdict"] == "PASS", (verb, host, node["findings"])


def test_a_secret_in_the_executors_environment_never_reaches_the_controllers_runs(halls):
    executor = halls.hall(HALL_A)
    seen = subprocess.run(
        [
            "ssh",
            "-i",
            str(halls.dir / "ssh" / "id_ed25519"),
            "-o",
            f"UserKnownHostsFile={halls.dir / 'ssh' / 'known_hosts'}",
            "-o",
            "BatchMode=yes",
            f"root@{executor.executor_ip}",
            "printenv",
            "GPUBOOT_TEST_SECRET",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert seen.stdout.strip() == SENTINEL, "the sentinel is not in the executor's ssh sessions"
    assert len(RUN_DIRS) >= 5, RUN_DIRS
    leaked = [
        str(path)
        for run_dir in RUN_DIRS
        for path in run_dir.rglob("*")
        if path.is_file() and not path.is_symlink() and SENTINEL.encode() in path.read_bytes()
    ]
    assert not leaked, leaked
