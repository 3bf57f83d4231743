"""What an operator installs, as they install it: the product's wheel alone, in a fresh
venv, run from outside the repository, converges a lab node; the lab's wheel (gpuboot-lab,
built from lab/) adds `gpuboot lab`. The product's wheel carries the Ansible content
(roles, playbooks, the project's collection), profiles and stacks and no lab: no
gpuboot_lab, no emulator, no lab entry point; importing the product does not import the lab.
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

from tests.paths import REPO

from .conftest import ssh

pytestmark = pytest.mark.lab
PINNED = ["nvidia-driver-550", "nvidia-dkms-550", "nvidia-utils-550", "nvidia-compute-utils-550"]
PRODUCT_DATA = ("gpuboot/ansible/", "gpuboot/profiles/", "gpuboot/stacks/")
LAB_VERBS = ("up", "image", "status", "down", "fault", "clear", "reboot")


def _run(*argv: str | Path, **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kw)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _tree_files(root: Path) -> list[str]:
    """What the tree holds: tracked and new files and links (lab/gpuboot_lab), without what
    .gitignore excludes."""
    out = _run("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return [
        f for f in out.stdout.split("\0") if f and ((root / f).is_symlink() or (root / f).is_file())
    ]


def build_wheels(src: Path, work: Path) -> tuple[Path, Path]:
    """The product's wheel and the lab's, built from a copy of the tree: setuptools' build/
    would otherwise reuse stale files."""
    copy = work / "src"
    for rel in _tree_files(src):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, copy / rel, follow_symlinks=False)
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "-w",
        work / "dist",
        copy,
        copy / "lab",
    )
    (product,) = (work / "dist").glob("gpuboot-*.whl")
    (lab,) = (work / "dist").glob("gpuboot_lab-*.whl")
    return product, lab


def missing_from_wheel(src: Path, wheel: Path, prefixes: tuple[str, ...]) -> list[str]:
    """The tree's files under these prefixes that the wheel lacks."""
    names = set(zipfile.ZipFile(wheel).namelist())
    return [f for f in _tree_files(src) if f.startswith(prefixes) and f not in names]


def lab_in_product(wheel: Path) -> list[str]:
    """Lab code, emulator files or lab entry points found in the product's wheel."""
    found = []
    with zipfile.ZipFile(wheel) as whl:
        for name in whl.namelist():
            if name.split("/")[0] in ("gpuboot_lab", "emu") or "gpuemu" in name:
                found.append(name)
            if name.endswith(".dist-info/entry_points.txt"):
                found += [
                    f"{name}: {line}"
                    for line in whl.read(name).decode().splitlines()
                    if "gpuboot.verbs" in line or "gpuboot_lab" in line
                ]
    return found


def _metadata(wheel: Path, field: str) -> list[str]:
    with zipfile.ZipFile(wheel) as whl:
        (meta,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        lines = whl.read(meta).decode().splitlines()
    return [line.split(": ", 1)[1] for line in lines if line.startswith(f"{field}: ")]


def test_product_wheel_converges_a_lab_node_lab_wheel_adds_its_verbs(
    make_lab, tmp_path: Path
) -> None:
    started = time.monotonic()
    product, lab_wheel = build_wheels(REPO, tmp_path)
    names = set(zipfile.ZipFile(product).namelist())
    assert "gpuboot/ansible/playbooks/install.yml" in names
    assert "gpuboot/ansible/roles/nvidia_driver/tasks/main.yml" in names
    assert any(n.startswith("gpuboot/ansible/collections/ansible_collections/") for n in names)
    assert missing_from_wheel(REPO, product, PRODUCT_DATA) == []
    assert lab_in_product(product) == []
    assert "gpuboot_lab/emulator/gpuemu" in zipfile.ZipFile(lab_wheel).namelist()
    assert missing_from_wheel(REPO, lab_wheel, ("gpuboot_lab/",)) == []
    (version,) = _metadata(product, "Version")
    assert _metadata(lab_wheel, "Requires-Dist") == [f"gpuboot=={version}"]

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", product)
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

    def in_venv(*argv: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(venv / "bin" / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            cwd=outside,
            env=env,
            timeout=900,
            check=False,
        )
        assert proc.returncode == rc, (
            f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
        return proc

    probe = in_venv(
        "python",
        "-c",
        "import importlib.metadata, importlib.util, json, sys\n"
        "import gpuboot, gpuboot.cli, gpuboot.install, gpuboot.certify\n"
        "print(json.dumps([gpuboot.__file__,"
        " sorted(m for m in sys.modules if m.split('.')[0] in ('gpuboot_lab', 'emu')),"
        " importlib.util.find_spec('gpuboot_lab') is None,"
        " [e.value for e in importlib.metadata.entry_points(group='gpuboot.verbs')]]))",
    )
    where, lab_modules, no_lab, verbs = json.loads(probe.stdout)
    assert where.startswith(str(venv)), where
    assert (lab_modules, no_lab, verbs) == ([], True, [])
    assert "certify" in in_venv("gpuboot", "--help").stdout
    missing = in_venv("gpuboot", "lab", "status", rc=2)  # the product's own answer
    assert "the lab is not installed" in missing.stdout + missing.stderr

    lab = make_lab(nodes=1)
    run = json.loads(in_venv("gpuboot", "install", "-i", str(lab.inventory), "--json").stdout)
    node = run["hosts"]["node1"]
    assert node["status"] == "changed" and node["changed"] > 0
    holds = ssh(lab, "node1", "apt-mark showhold").stdout.split()
    assert set(PINNED) <= set(holds)
    versions = ssh(lab, "node1", "dpkg-query -W -f='${Version}\\n' nvidia-driver-550").stdout
    assert versions.split() == ["550.54.15-1"]

    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", lab_wheel)
    usage = in_venv("gpuboot", "lab", "--help").stdout
    assert all(f"\n    {verb} " in usage for verb in LAB_VERBS), usage
    emulator = in_venv(
        "python", "-c", "from gpuboot_lab import lab; print(lab.EMULATOR_DIR / 'gpuemu')"
    ).stdout.strip()
    assert emulator.startswith(str(venv)) and os.access(emulator, os.X_OK), emulator
    print(
        f"wheels built and the product installed in {installed:.0f} s;"
        f" total {time.monotonic() - started:.0f} s"
    )
