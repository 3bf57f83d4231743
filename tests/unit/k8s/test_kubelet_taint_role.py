"""The gpuboot_kubelet_taint role, run for real on this machine against a scratch file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuboot import paths

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

ROLE = "gpuboot_kubelet_taint"
FLAG = "--register-with-taints=gpuboot.io/uncertified=true:NoSchedule"


def _play(tmp_path: Path, env_file: Path, **extra: object) -> subprocess.CompletedProcess:
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        f"  roles: [{{role: {ROLE}}}]\n"
    )
    extra_vars = {
        "gpuboot_kubelet_taint_env_file": str(env_file),
        "ansible_python_interpreter": sys.executable,
        **extra,
    }
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(paths.ROLES_DIR),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,",
         str(playbook), "-e", json.dumps(extra_vars)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def _changed(out: str) -> int:
    recap = next(line for line in out.splitlines() if line.startswith("localhost"))
    return int(recap.split("changed=")[1].split()[0])


def test_sets_the_taint_keeps_other_args_and_is_idempotent(tmp_path: Path):
    env_file = tmp_path / "kubelet"
    env_file.write_text(
        "# written by kubeadm\n"
        "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.5 --register-with-taints old=x:NoExecute"
        " --max-pods=64\n"
        "OTHER=1\n"
    )
    first = _play(tmp_path, env_file)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _changed(first.stdout) == 1
    assert env_file.read_text() == (
        "# written by kubeadm\n"
        f'KUBELET_EXTRA_ARGS="--node-ip=10.0.0.5 --max-pods=64 {FLAG}"\n'
        "OTHER=1\n"
    )
    second = _play(tmp_path, env_file)
    assert second.returncode == 0 and _changed(second.stdout) == 0, second.stdout


def test_creates_the_file_and_joins_several_taints(tmp_path: Path):
    env_file = tmp_path / "absent" / "kubelet"
    env_file.parent.mkdir()
    taints = ["gpuboot.io/uncertified=true:NoSchedule", "nvidia.com/gpu:NoSchedule"]
    result = _play(tmp_path, env_file, gpuboot_kubelet_taint_taints=taints)
    assert result.returncode == 0, result.stdout + result.stderr
    assert env_file.read_text() == f'KUBELET_EXTRA_ARGS="{FLAG},nvidia.com/gpu:NoSchedule"\n'
    assert oct(env_file.stat().st_mode & 0o777) == "0o644"


def test_refuses_malformed_taints_before_writing(tmp_path: Path):
    env_file = tmp_path / "kubelet"
    bad = ["gpuboot.io/uncertified=true", "a b:NoSchedule", "k=v:Never"]  # no effect, space, effect
    result = _play(tmp_path, env_file, gpuboot_kubelet_taint_taints=[*bad, "ok=1:NoExecute"])
    assert result.returncode != 0
    assert "K8S-001" in result.stdout
    assert f"malformed taint(s) {bad}" in result.stdout  # exactly the bad ones named
    assert not env_file.exists()


def test_disabled_does_nothing(tmp_path: Path):
    env_file = tmp_path / "kubelet"
    result = _play(tmp_path, env_file, gpuboot_kubelet_taint_enabled=False)
    assert result.returncode == 0 and _changed(result.stdout) == 0
    assert not env_file.exists()
