"""A node's ssh transport: ssh started from an argument vector built from the host's checked
inventory variables; no shell sees a value, and neither an ansible.cfg nor the ANSIBLE_SSH_*
environment reaches it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from gpuboot import transport

HOSTVARS = {
    "ansible_host": "10.0.0.5",
    "ansible_user": "ops",
    "ansible_port": 2222,
    "ansible_ssh_private_key_file": "/keys/id ed25519",
    "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o 'SetEnv A=b c'",
}
HOSTILE_ENV = {
    "ANSIBLE_SSH_ARGS": "-o ProxyCommand=touch /tmp/x",
    "ANSIBLE_SSH_COMMON_ARGS": "-o LocalCommand=touch -o PermitLocalCommand=yes",
    "ANSIBLE_SSH_EXTRA_ARGS": "-F /tmp/ssh_config",
}


class Started:
    """subprocess.Popen as the transport calls it: records, answers "ok"."""

    calls: ClassVar[list[tuple[object, dict]]] = []

    def __init__(self, args, **kwargs):
        Started.calls.append((args, kwargs))
        self.returncode = 0

    def communicate(self):
        return b"ok\n", b""


@pytest.fixture
def started(monkeypatch):
    Started.calls = []
    monkeypatch.setattr(subprocess, "Popen", Started)  # testinfra's shell line would come here too
    return Started.calls


def test_ssh_is_one_argument_vector_from_the_inventory(started):
    host = transport.connect("gpu1", HOSTVARS, Path("/inv.yml"))
    assert host.run("echo hi; uname -a").stdout == "ok\n"
    [(argv, kwargs)] = started
    assert not kwargs.get("shell")
    assert argv == [
        "ssh",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "SetEnv A=b c",
        "-o",
        "User=ops",
        "-o",
        "Port=2222",
        "-i",
        "/keys/id ed25519",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "ControlMaster=auto",
        "-o",
        "ControlPersist=60s",
        "--",  # ssh reads options after its host unless they were ended
        "10.0.0.5",
        "echo hi; uname -a",  # the remote command: one argument, the node's shell reads it
    ]


def test_the_operators_timeout_and_master_options_are_not_doubled(started):
    hostvars = {"ansible_ssh_extra_args": "-oConnectTimeout=3 -o controlmaster=no"}
    transport.connect("gpu1", hostvars, Path("/inv.yml")).run("true")
    [(argv, _)] = started
    assert argv == ["ssh", "-oConnectTimeout=3", "-o", "controlmaster=no", "--", "gpu1", "true"]


def test_become_runs_the_command_through_sudo_and_ipv6_is_one_argument(started):
    hostvars = {"ansible_host": "fd00::12", "ansible_become": "true", "ansible_user": "ops"}
    transport.connect("gpu1", hostvars, Path("/inv.yml")).run("id")
    [(argv, _)] = started
    assert argv[-3:] == ["--", "fd00::12", "sudo -u root /bin/sh -c id"]


def test_neither_ansible_cfg_nor_the_ssh_environment_reaches_the_transport(
    started, tmp_path, monkeypatch
):
    (tmp_path / "ansible.cfg").write_text(
        "[ssh_connection]\n"
        "ssh_args = -o ProxyCommand=touch /tmp/x\n"
        "control_path = /tmp/hostile-%%h\n"
        "[defaults]\nremote_port = 2222\n"
    )
    monkeypatch.chdir(tmp_path)
    for var, value in HOSTILE_ENV.items():
        monkeypatch.setenv(var, value)
    transport.connect("gpu1", {"ansible_user": "ops"}, Path("/inv.yml")).run("true")
    [(argv, _)] = started
    words = " ".join(argv).lower()
    for word in ("proxycommand", "localcommand", "-f", "controlpath", "hostile"):
        assert word not in words, argv


FAKE_SSH = """#!{python}
import json, sys
with open({record!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
print("answered")
"""


@pytest.mark.subprocess
def test_a_hostile_ansible_cfg_runs_nothing_on_the_controller(tmp_path, monkeypatch):
    """Through a real process: ssh (a fake on PATH) is started directly, and what the
    working directory's ansible.cfg and the environment say never reaches a shell."""
    bin_dir, work = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir()
    work.mkdir(mode=0o700)
    record, marker = tmp_path / "argv.jsonl", tmp_path / "ran-on-the-controller"
    ssh = bin_dir / "ssh"
    ssh.write_text(FAKE_SSH.format(python=sys.executable, record=str(record)))
    ssh.chmod(ssh.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (work / "ansible.cfg").write_text(
        f"[ssh_connection]\nssh_args = -o ControlMaster=no $(touch {marker}-subst) `touch "
        f"{marker}-tick`\n"
    )
    monkeypatch.chdir(work)
    monkeypatch.setenv("ANSIBLE_SSH_EXTRA_ARGS", f"-o X=y; touch {marker}-env; #")
    host = transport.connect("gpu1", {"ansible_host": "10.0.0.5"}, Path("/inv.yml"))
    out = host.run("echo $HOME; touch /tmp/on-the-node")
    assert not list(tmp_path.glob("ran-on-the-controller*")), "a shell ran ansible.cfg's words"
    assert out.rc == 0 and out.stdout == "answered\n"
    [argv] = [json.loads(line) for line in record.read_text().splitlines()]
    assert argv[-3:] == ["--", "10.0.0.5", "echo $HOME; touch /tmp/on-the-node"]
    assert "X=y" not in argv and "ControlMaster=no" not in argv


@pytest.mark.subprocess
def test_a_node_s_answer_through_the_transport_is_read_within_the_cap(tmp_path, monkeypatch):
    """ssh started from an argument vector is read by remote.communicate, as testinfra's
    shell line was: the cap a call sets ends an answer that passes it."""
    from gpuboot import remote

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write('x' * (4 << 20))\n")
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    host = transport.connect("gpu1", {}, Path("/inv.yml"))
    with pytest.raises(remote.AnswerTooLarge):
        remote.run_with_deadline(host, "cat /dev/zero", 60, "the test", max_bytes=1 << 20)
    assert remote.run_with_deadline(host, "true", 60, "the test").stdout == "x" * (4 << 20)
