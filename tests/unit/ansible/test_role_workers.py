"""Controller CPU per node follows the task results a node produces (one forked worker
each, skipped or not): a group of tasks a node never runs sits behind ONE skipped include,
and the converged fingerprint is one script the controller sends, checked here on local
fake state (no node, no podman)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from gpuboot import paths

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

ROLES = paths.ROLES_DIR
SCRIPT = ROLES / "gpuboot_converged/files/gpuboot-converged"
# A when: that names an OS family (the roles' __<role>_el flags, gpuboot_os_family).
OS_FAMILY = re.compile(r"__\w+_el\b|gpuboot_os_family")


def _tasks():
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            yield path, task


def test_os_family_branches_sit_behind_one_include():
    # Per task, a `when: <EL flag>` costs a node of the other family a skipped result (a
    # worker) each: two or more in one file belong in a file of their own, included once.
    per_file: dict[str, list[str]] = {}
    for path, task in _tasks():
        if "ansible.builtin.include_tasks" not in task and OS_FAMILY.search(
            str(task.get("when", ""))
        ):
            per_file.setdefault(str(path.relative_to(ROLES)), []).append(task["name"])
    groups = {f: names for f, names in per_file.items() if len(names) > 1}
    assert not groups, f"OS-family groups not behind one include: {groups}"


def _run(tmp_path, mode, digest="d1", requests="none-*", rails="", configfs=""):
    argv = [
        "bash", "-s", "--", mode, str(tmp_path / "record"), digest, "debian",
        str(tmp_path / "sys"), "0", str(tmp_path / requests), str(tmp_path / "etc"),
        "nvidia-*", rails, configfs,
    ]  # fmt: skip
    proc = subprocess.run(argv, input=SCRIPT.read_text(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.skipif(subprocess.run(["which", "dpkg-query"]).returncode, reason="needs dpkg")
def test_the_fingerprint_matches_itself_and_names_what_drifted(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/gpuboot.conf").write_text("x\n")
    assert _run(tmp_path, "check") == ["never-recorded"]
    assert _run(tmp_path, "record") == []
    assert (tmp_path / "record").read_text().startswith("desired d1\npackages ")
    assert _run(tmp_path, "check") == []  # nothing drifted
    (tmp_path / "etc/gpuboot.conf").write_text("y\n")
    assert _run(tmp_path, "check", digest="d2") == ["desired", "files"]
    (tmp_path / "reboot-required.gpuboot-x").write_text("kernel\n")
    assert _run(tmp_path, "check", requests="reboot-required.gpuboot-*") == ["reboot-pending"]
    assert _run(tmp_path, "record", requests="reboot-required.gpuboot-*") == []
    assert not (tmp_path / "record").exists()  # never vouches while a reboot is pending


@pytest.mark.skipif(subprocess.run(["which", "dpkg-query"]).returncode, reason="needs dpkg")
def test_the_fingerprint_sees_the_pods_rdma_state_that_only_the_kernel_holds(tmp_path):
    # VFs a firmware reset took, or RDMA CM's ToS set by hand, leave no file or package
    # behind: without this part a plain install would skip the node as converged
    (tmp_path / "etc").mkdir()
    pf = tmp_path / "sys/class/net/ens1np0"
    (pf / "device").mkdir(parents=True)
    (pf / "device/sriov_numvfs").write_text("8\n")
    (pf / "mtu").write_text("9000\n")
    cm = tmp_path / "config/rdma_cm/mlx5_0/ports/1"
    cm.mkdir(parents=True)
    (cm / "default_roce_mode").write_text("RoCE v2\n")
    (cm / "default_roce_tos").write_text("104\n")
    pods = {"rails": "ens1np0", "configfs": str(tmp_path / "config")}
    assert _run(tmp_path, "record", **pods) == []
    assert _run(tmp_path, "check", **pods) == []
    (pf / "device/sriov_numvfs").write_text("0\n")
    assert _run(tmp_path, "check", **pods) == ["rdma"]
    (pf / "device/sriov_numvfs").write_text("8\n")
    (cm / "default_roce_tos").write_text("0\n")
    assert _run(tmp_path, "check", **pods) == ["rdma"]
    # a node not prepared for pods reads none of it (no configfs given)
    assert _run(tmp_path, "record") == []
    assert "rdma" not in [
        line.split()[0] for line in (tmp_path / "record").read_text().splitlines()
    ]
