"""Trust at the edges, on real lab nodes over real SSH: what a node answers, what an
inventory says and what the operator types must never write outside the run, run a
command on the controller or lose a host's result.

These share the session's 2-node lab; none needs a freshly installed node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from .conftest import gpuboot, ssh, ssh_ok

pytestmark = pytest.mark.lab

# Replaces `tar` on a node: whatever it is asked, it prints a tar whose members try to
# escape the bundle (a relative climb, an absolute name), a symlink to a controller
# secret under an expected probe name, and a device node.
HOSTILE_TAR = r"""#!/usr/bin/python3
import io, sys, tarfile
marker = "{marker}"
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tar:
    for name in ("../../../../../../../.." + marker + "-rel", marker + "-abs"):
        data = b"written by a node\n"
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    link = tarfile.TarInfo("nvidia-smi_-q.txt")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/shadow"
    tar.addfile(link)
    dev = tarfile.TarInfo("dmesg.txt")
    dev.type = tarfile.CHRTYPE
    tar.addfile(dev)
sys.stdout.buffer.write(buf.getvalue())
"""


def _inventory_copy(lab, tmp_path: Path, name: str = "site.yml", **node1_vars) -> Path:
    inventory = yaml.safe_load(lab.inventory.read_text())
    inventory["all"]["children"]["gpu_nodes"]["hosts"]["node1"].update(node1_vars)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_hostile_tar_from_a_node_writes_nothing_outside_the_run(lab2):
    marker = f"/tmp/gpuboot-hostile-{uuid.uuid4().hex[:8]}"
    ssh_ok(lab2, "mv /usr/bin/tar /usr/bin/tar.real")
    try:
        ssh_ok(lab2, f"cat >/usr/bin/tar <<'EOF'\n{HOSTILE_TAR.format(marker=marker)}EOF\n")
        ssh_ok(lab2, "chmod 755 /usr/bin/tar")
        proc = gpuboot("certify", "-i", str(lab2.inventory), "--probes", "none", "--json")
    finally:
        ssh_ok(lab2, "mv -f /usr/bin/tar.real /usr/bin/tar")
    written = [p for p in (Path(marker + "-rel"), Path(marker + "-abs")) if p.exists()]
    for p in written:
        p.unlink()
    assert not written, f"a node's tar wrote {written} on the controller"
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    nodes = {n["host"]: n for n in doc["nodes"]}
    assert nodes["node1"]["verdict"] == "ERROR"  # the harness could not read it: not hardware
    reasons = " ".join(f["reason"] for f in nodes["node1"]["findings"])
    assert "root:" not in reasons  # no controller secret in a finding
    # node2's own evidence was collected and judged as usual
    assert not any("evidence collection" in f["reason"] for f in nodes["node2"]["findings"])
    bundle = Path(doc["bundle"])
    assert not (bundle / "node1" / "nvidia-smi_-q.txt").is_symlink()
    for path in bundle.rglob("*"):
        assert path.resolve().is_relative_to(bundle.resolve()), path


@pytest.mark.parametrize("verb", ["certify", "plan", "scan"])
def test_ssh_args_from_the_inventory_never_reach_a_controller_shell(lab2, tmp_path, verb):
    marker = tmp_path / "ran-on-the-controller"
    args = f"-o ConnectTimeout=5 ; touch {marker}; #"
    path = _inventory_copy(lab2, tmp_path, ansible_ssh_common_args=args)
    proc = gpuboot(verb, "-i", str(path))
    assert not marker.exists(), f"{verb} ran an inventory value in a controller shell"
    assert proc.returncode == 2, proc.stderr
    assert "ansible_ssh_common_args" in proc.stderr and "node1" in proc.stderr


def _gpuboot_in(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env={**os.environ, **env},
    )


def _reached_every_node(verb: str, proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode in (0, 1), proc.stderr
    nodes = json.loads(proc.stdout)["nodes"]
    assert sorted(n["host"] for n in nodes) == ["node1", "node2"]
    if verb == "certify":  # each node's evidence came over its ssh
        for node in nodes:
            assert not any("evidence collection" in f["reason"] for f in node["findings"]), node


@pytest.mark.parametrize("verb", ["plan", "certify"])
def test_a_command_in_the_working_directory_s_ansible_cfg_is_refused(lab2, tmp_path, verb):
    """testinfra read ./ansible.cfg and handed its ssh_args to ssh: a ProxyCommand there
    ran on the controller. Now: exit 2 naming the file and the option, no host touched."""
    marker = tmp_path / "ran-on-the-controller"
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "ansible.cfg").write_text(
        f"[ssh_connection]\nssh_args = -o 'ProxyCommand=touch {marker}'\n"
    )
    proc = _gpuboot_in(work, verb, "-i", str(lab2.inventory), "--json")
    assert not marker.exists(), f"{verb} ran ./ansible.cfg's ProxyCommand on the controller"
    assert proc.returncode == 2, proc.stderr
    assert str(work / "ansible.cfg") in proc.stderr and "ProxyCommand" in proc.stderr


@pytest.mark.parametrize("verb", ["plan", "certify"])
def test_shell_syntax_in_the_working_directory_s_ansible_cfg_reaches_no_shell(lab2, tmp_path, verb):
    """testinfra pasted ./ansible.cfg's ssh_args into a shell line: `; touch` ran. Now ssh
    takes the node's options from the inventory only, and the run reaches every node."""
    marker = tmp_path / "ran-on-the-controller"
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "ansible.cfg").write_text(
        f"[ssh_connection]\nssh_args = -o ConnectTimeout=5 ; touch {marker} ; #\n"
    )
    args = ["--probes", "none"] if verb == "certify" else []
    proc = _gpuboot_in(work, verb, "-i", str(lab2.inventory), "--json", *args)
    assert not marker.exists(), f"{verb} ran ./ansible.cfg's words in a controller shell"
    _reached_every_node(verb, proc)


def test_a_world_writable_directory_s_ansible_cfg_is_ignored(lab2, tmp_path):
    """Ansible ignores an ansible.cfg anyone could have written; testinfra read it."""
    marker = tmp_path / "ran-on-the-controller"
    work = tmp_path / "shared"
    work.mkdir()
    work.chmod(0o777)
    (work / "ansible.cfg").write_text(
        f"[ssh_connection]\nssh_args = -o 'ProxyCommand=touch {marker}'\n"
    )
    proc = _gpuboot_in(work, "certify", "-i", str(lab2.inventory), "--probes", "none", "--json")
    assert not marker.exists(), "certify ran a world-writable ansible.cfg's ProxyCommand"
    _reached_every_node("certify", proc)


@pytest.mark.parametrize(
    ("verb", "var"),
    [
        ("plan", "ANSIBLE_SSH_ARGS"),
        ("certify", "ANSIBLE_SSH_COMMON_ARGS"),
        ("certify", "ANSIBLE_SSH_EXTRA_ARGS"),
    ],
)
def test_a_command_in_the_ssh_environment_is_refused(lab2, tmp_path, verb, var):
    marker = tmp_path / "ran-on-the-controller"
    env = {var: f"-o 'ProxyCommand=touch {marker}'"}
    proc = _gpuboot_in(tmp_path, verb, "-i", str(lab2.inventory), "--json", **env)
    assert not marker.exists(), f"{verb} ran {var}'s ProxyCommand on the controller"
    assert proc.returncode == 2, proc.stderr
    assert var in proc.stderr and "ProxyCommand" in proc.stderr


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ansible_ssh_common_args", "-o 'ProxyCommand=touch {marker}'"),
        ("ansible_ssh_extra_args", "-o'LocalCommand=touch {marker}' -oPermitLocalCommand=yes"),
        ("ansible_ssh_common_args", "-o 'KnownHostsCommand=/usr/bin/touch {marker}'"),
        ("ansible_ssh_executable", "{marker}-ssh"),
    ],
)
def test_an_ssh_option_that_runs_a_command_is_refused_from_the_inventory(
    lab2, tmp_path, var, value
):
    """They passed the inventory's "no shell syntax" check and ran on the controller."""
    marker = tmp_path / "ran-on-the-controller"
    fake_ssh = tmp_path / "ran-on-the-controller-ssh"
    fake_ssh.write_text(f'#!/bin/sh\ntouch {marker}\nexec ssh "$@"\n')
    fake_ssh.chmod(0o755)
    path = _inventory_copy(lab2, tmp_path, **{var: value.format(marker=marker)})
    proc = gpuboot("certify", "-i", str(path), "--probes", "none", "--json")
    assert not marker.exists(), f"certify ran {var} on the controller"
    assert proc.returncode == 2, proc.stderr
    assert f"node1.{var}" in proc.stderr and "gpuboot_allow_ssh_options" in proc.stderr


def test_relative_inventory_path_reaches_the_inventory_hosts(lab2, tmp_path):
    """ansible-runner runs in its private data dir: a relative -i used to load nothing
    there, and the play went to the host *names* through DNS."""
    _inventory_copy(lab2, tmp_path, name="site.yml")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", "install", "-i", "site.yml", "--check", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert proc.returncode in (0, 1), proc.stderr
    hosts = json.loads(proc.stdout)["hosts"]
    assert sorted(hosts) == ["node1", "node2"]
    # reached at their addresses (a converged lab: ok; a fresh one: changed), never unreachable
    assert {r["status"] for r in hosts.values()} <= {"ok", "changed"}, hosts


def _runs_dir() -> Path:
    return Path(os.environ["GPUBOOT_RUNS"])


def test_ctrl_c_ends_the_run_its_ssh_and_keeps_the_rollout(lab2):
    before = set(_runs_dir().iterdir()) if _runs_dir().exists() else set()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuboot.cli", "install", "-i", str(lab2.inventory), "--full"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a terminal's Ctrl-C reaches the whole process group
    )
    try:
        deadline = time.monotonic() + 120
        run_dir = None
        while time.monotonic() < deadline:  # interrupt once the play is talking to nodes
            new = [p for p in _runs_dir().iterdir() if p not in before]
            events = list(new[0].glob("**/job_events/*.json")) if new else []
            if len(events) >= 8:
                run_dir = new[0]
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        assert run_dir is not None, "the install never started its play"
        os.killpg(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    time.sleep(1)
    left = subprocess.run(
        ["ps", "-o", "pid=,args=", "--sid", str(proc.pid)], capture_output=True, text=True
    ).stdout.strip()
    assert not left, f"processes of the interrupted run still alive:\n{left}"
    masters = subprocess.run(["pgrep", "-af", str(run_dir)], capture_output=True, text=True)
    assert not masters.stdout.strip(), f"ssh masters left:\n{masters.stdout}"
    rollout = json.loads((run_dir / "rollout.json").read_text())
    assert set(rollout["hosts"]) == {"node1", "node2"}
    # the lab stays usable for the tests after this one
    assert ssh(lab2, "node1", "true").returncode == 0


@pytest.mark.parametrize("verb", ["certify", "scan"])
def test_evaluate_agrees_with_a_probe_level_none_run(lab2, tmp_path, verb):
    """scan's default level is none; writing the bundle used to overwrite the level kept
    in meta.json, so the offline verdict differed from the run's."""
    extra = ["--history", str(tmp_path / "h.jsonl")] if verb == "scan" else []
    proc = gpuboot(verb, "-i", str(lab2.inventory), "--probes", "none", "--json", *extra)
    # on a lab not yet converged both nodes fail the stack rules alike: the scan's breaker
    # opens (6); the verdicts are what is compared
    assert proc.returncode in ((0, 1, 6) if verb == "scan" else (0, 1)), proc.stderr
    doc = json.loads(proc.stdout)
    offline = json.loads(gpuboot("evaluate", "--bundle", doc["bundle"], "--json").stdout)

    def statuses(report):
        return {n["host"]: {f["rule"]: f["status"] for f in n["findings"]} for n in report["nodes"]}

    assert statuses(offline) == statuses(doc)


def test_a_node_that_never_answers_is_cut_off_at_its_deadline(lab2, tmp_path):
    """A tool stuck in the kernel outlives the node's own `timeout`, and a hostile node may
    never answer: the controller's deadline (here gpuboot_collect_timeout: 15) ends it."""
    pidfile = "/run/gpuboot-test-hung-tar.pid"
    ssh_ok(lab2, "mv /usr/bin/tar /usr/bin/tar.real")
    try:
        ssh_ok(
            lab2,
            f"printf '#!/bin/sh\\necho $$ >{pidfile}\\nexec sleep 600\\n' >/usr/bin/tar"
            " && chmod 755 /usr/bin/tar",
        )
        path = _inventory_copy(lab2, tmp_path, gpuboot_collect_timeout=15)
        started = time.monotonic()
        proc = gpuboot("certify", "-i", str(path), "--probes", "none", "--json")
        took = time.monotonic() - started
    finally:
        ssh_ok(lab2, f"mv -f /usr/bin/tar.real /usr/bin/tar; kill $(cat {pidfile}) || true")
    assert proc.returncode == 1, proc.stderr
    assert took < 120, f"certify took {took:.0f}s"
    nodes = {n["host"]: n for n in json.loads(proc.stdout)["nodes"]}
    assert nodes["node1"]["verdict"] == "ERROR"
    assert "timed out after 15s" in nodes["node1"]["findings"][0]["reason"]
    assert not any("timed out" in f["reason"] for f in nodes["node2"]["findings"])
