"""The product as an operator installs it: a wheel built from the tree, in a fresh venv,
run from outside the repository, converges a lab node. The wheel carries the Ansible
content (roles, playbooks, the project's collection), profiles and stacks; importing the
product does not import the lab.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from .conftest import ssh

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
PINNED = ["nvidia-driver-550", "nvidia-dkms-550", "nvidia-utils-550", "nvidia-compute-utils-550"]


def _run(*argv: str | Path, **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kw)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _tree_files(root: Path) -> list[str]:
    """What the tree holds: tracked and new files, without what .gitignore excludes."""
    out = _run("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return [f for f in out.stdout.split("\0") if f and (root / f).is_file()]


def build_wheel(src: Path, work: Path) -> Path:
    """Build from a copy of the tree: setuptools' build/ would otherwise reuse stale files."""
    copy = work / "src"
    for rel in _tree_files(src):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, copy / rel)
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", work / "dist", copy)
    (wheel,) = (work / "dist").glob("gpuboot-*.whl")
    return wheel


def missing_from_wheel(src: Path, wheel: Path) -> list[str]:
    """Package data of the tree the wheel lacks (and lab code found inside the product)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = [
        f
        for f in _tree_files(src)
        if f.startswith(("gpuboot/ansible/", "gpuboot/profiles/", "gpuboot/stacks/"))
        or f.startswith("gpuboot_lab/")
    ]
    missing = [f for f in wanted if f not in names]
    missing += [
        f"(lab inside the product) {n}" for n in sorted(names) if n.startswith("gpuboot/lab/")
    ]
    return missing


def test_wheel_in_a_fresh_venv_converges_a_lab_node(make_lab, tmp_path: Path) -> None:
    started = time.monotonic()
    wheel = build_wheel(REPO, tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "gpuboot/ansible/playbooks/install.yml" in names
    assert "gpuboot/ansible/roles/nvidia_driver/tasks/main.yml" in names
    assert any(n.startswith("gpuboot/ansible/collections/ansible_collections/") for n in names)
    assert "gpuboot_lab/emulator/gpuemu" in names
    assert missing_from_wheel(REPO, wheel) == []

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    installed = time.monotonic() - started

    outside = tmp_path / "elsewhere"  # no repository on sys.path, no repo-relative paths
    outside.mkdir()
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join(
        [str(venv / "bin")]
        + [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO))]
    )
    probe = _run(
        venv / "bin" / "python",
        "-c",
        "import json, sys, gpuboot, gpuboot.cli, gpuboot.install, gpuboot.certify\n"
        "print(json.dumps([gpuboot.__file__,"
        " sorted(m for m in sys.modules if m.split('.')[0] in ('gpuboot_lab', 'emu'))]))",
        cwd=outside,
        env=env,
    )
    where, lab_modules = json.loads(probe.stdout)
    assert where.startswith(str(venv)), where
    assert lab_modules == []

    lab = make_lab(nodes=1)
    proc = subprocess.run(
        [str(venv / "bin" / "gpuboot"), "install", "-i", str(lab.inventory), "--json"],
        capture_output=True,
        text=True,
        cwd=outside,
        env=env,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    hosts = json.loads(proc.stdout)["hosts"]
    assert hosts["node1"]["status"] == "changed" and hosts["node1"]["changed"] > 0
    holds = ssh(lab, "node1", "apt-mark showhold").stdout.split()
    assert set(PINNED) <= set(holds)
    versions = ssh(lab, "node1", "dpkg-query -W -f='${Version}\\n' nvidia-driver-550").stdout
    assert versions.split() == ["550.54.15-1"]
    print(
        f"wheel built and installed in {installed:.0f} s; total {time.monotonic() - started:.0f} s"
    )
