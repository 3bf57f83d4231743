"""`gpuboot mirror --repo`: the dependency closure from the mirror's own Packages index
(Depends and Pre-Depends, alternatives, versioned constraints, virtual packages through
Provides), every dependency it cannot satisfy named (exit 1). On a real Debian index
excerpt (tests/fixtures/mirror/README.md says where it comes from) and on the lab's
repository index as gpuboot_lab.repo builds it."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuboot import mirror
from tests.paths import REPO

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

FIXTURE = REPO / "tests" / "fixtures" / "mirror" / "bookworm-main-amd64.Packages"
ROOTS = [
    ("dkms", "3.0.10-8+deb12u1"),
    ("rdma-core", "44.0-2"),
    ("infiniband-diags", "44.0-2"),
    ("pciutils", "1:3.9.0-4"),
    ("libapt-pkg-dev", "2.6.1"),
]


def gpuboot(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuboot.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _closure(text: str) -> mirror.Closure:
    return mirror.closure(mirror.Index(mirror.parse_packages(text, "fixture")), ROOTS)


def test_real_debian_index_closure_is_complete_and_consistent():
    index = mirror.Index(mirror.parse_packages(FIXTURE.read_text(), "fixture"))
    found = mirror.closure(index, ROOTS)
    assert found.unsatisfied == []
    assert found.pinned == [name for name, _ in ROOTS]
    assert len(found.chosen) == 98  # the excerpt is exactly this closure (README)
    # every Depends/Pre-Depends group of every package is met inside the closure
    for entry in found.chosen.values():
        for group in entry.depends:
            assert any(mirror._held(index, found.chosen, rel) for rel in group), (entry, group)
    # Pre-Depends count: dkms pre-depends on lsb-release
    assert "dkms" in found.required_by["lsb-release"]
    # alternatives: the first one the index can satisfy (kmod | kldutils, gcc | c-compiler)
    assert "kmod" in found.chosen and "kldutils" not in found.chosen
    assert "gcc" in found.chosen
    # a versioned virtual package: libapt-pkg (= 2.6.1) is provided by libapt-pkg6.0
    assert found.via["libapt-pkg6.0"] == ["libapt-pkg"]
    assert found.required_by["libapt-pkg6.0"][0] == "libapt-pkg-dev"


def test_what_the_index_cannot_satisfy_is_named():
    text = FIXTURE.read_text()
    paragraphs = text.split("\n\n")
    no_libc = "\n\n".join(p for p in paragraphs if not p.startswith("Package: libc6\n"))
    found = _closure(no_libc)
    assert found.unsatisfied, "libc6 gone: its dependants are unsatisfied"
    assert {u["needs"].split(" ")[0] for u in found.unsatisfied} == {"libc6"}
    assert all("no package libc6" in u["reason"] for u in found.unsatisfied)
    assert "dpkg" in {u["package"] for u in found.unsatisfied}  # through its Pre-Depends
    # a versioned provide that no longer matches the versioned dependency
    older = text.replace("Provides: libapt-pkg (= 2.6.1)", "Provides: libapt-pkg (= 2.6.0)")
    assert older != text
    (bad,) = [u for u in _closure(older).unsatisfied if u["package"] == "libapt-pkg-dev"]
    assert bad["needs"] == "libapt-pkg (= 2.6.1)"


@pytest.mark.parametrize(
    ("constraint", "version", "allowed"),
    [
        (">=", "1:2.0-1", True),
        (">=", "2.0-1", False),  # no epoch sorts below epoch 1
        ("<<", "2.0~rc1", True),
        (">>", "2.0", False),
        ("=", "2.0", True),
    ],
)
def test_versioned_constraints_follow_dpkg(constraint, version, allowed):
    base = "2.0" if constraint in ("<<", ">>", "=") else "1:2.0-1"
    rel = mirror.parse_relations(f"x ({constraint} {base})")[0][0]
    assert rel.allows(version) is allowed


def test_cli_reads_compressed_index_from_a_directory_and_without_repo_says_top_level(
    tmp_path,
):
    repo = tmp_path / "mirror"
    repo.mkdir()
    (repo / "Packages.gz").write_bytes(gzip.compress(FIXTURE.read_bytes()))
    proc = gpuboot("mirror", "--stack", "lts-550-cuda12.4", "--repo", str(repo), "--json", "-q")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1  # the Debian excerpt holds no NVIDIA package
    assert doc["scope"] == "closure"
    assert "nvidia-driver-550-open" in {u["package"] for u in doc["unsatisfied"]}
    plain = gpuboot("mirror", "--stack", "lts-550-cuda12.4")
    assert plain.returncode == 0
    assert "top-level packages only" in plain.stderr
    assert (
        json.loads(gpuboot("mirror", "--stack", "lts-550-cuda12.4", "--json").stdout)["scope"]
        == "top-level"
    )
    missing = gpuboot("mirror", "--stack", "lts-550-cuda12.4", "--repo", str(tmp_path / "no"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


LAB_TOOLS = ("dpkg-deb", "apt-ftparchive", "gpg", "gpgconf")


@pytest.fixture(scope="module")
def lab_index(tmp_path_factory) -> Path:
    if any(shutil.which(t) is None for t in LAB_TOOLS):
        pytest.skip(f"the lab repository needs {LAB_TOOLS}")
    from gpuboot_lab.repo import build_repo

    base = tmp_path_factory.mktemp("labrepo")
    info = build_repo(base / "repo", base / "gnupg")
    yield info.out_dir / "dists" / info.suite / info.component / f"binary-{info.architecture}"
    subprocess.run(["gpgconf", "--homedir", str(base / "gnupg"), "--kill", "all"], check=False)


def test_lab_index_closure_of_a_stack_and_the_probe_tools(lab_index):
    proc = gpuboot(
        "mirror",
        "--stack",
        "lts-550-cuda12.4",
        "--repo",
        str(lab_index / "Packages"),
        "--probe-tools",
        "gpuboot-probes=0.5-1",
        "--json",
    )
    doc = json.loads(proc.stdout)
    chosen = {p["name"]: p["version"] for p in doc["packages"]}
    # the exact pins, never the newest the index has (550.127.08 and 550.144.03 are there)
    assert chosen["nvidia-driver-550-open"] == "550.54.15-1"
    assert chosen["nvidia-utils-550"] == "550.54.15-1"
    assert chosen["gpuboot-probes"] == "0.5-1"
    # dependencies are resolved at the version their Depends demand
    assert "nvidia-driver-550-open" in next(
        p["required_by"] for p in doc["packages"] if p["name"] == "nvidia-dkms-550-open"
    )
    # the lab serves no kernel (it leaves the host's alone): exactly those are missing
    assert proc.returncode == 1
    assert {u["package"] for u in doc["unsatisfied"]} == {
        "linux-image-5.15.0-119-generic",
        "linux-modules-5.15.0-119-generic",
        "linux-headers-5.15.0-119-generic",
        "linux-headers-5.15.0-119",
    }
    text = gpuboot(
        "mirror", "--stack", "lts-550-cuda12.4", "--repo", str(lab_index / "Packages")
    ).stderr
    assert "UNSATISFIED linux-image-5.15.0-119-generic" in text  # on stderr: stdout is the list


EL9 = REPO / "tests" / "fixtures" / "mirror" / "lab-el9-x86_64"
# A distro repository's answer for what NVIDIA's packages leave to it (written here by
# hand, in createrepo_c's layout): bash ships /bin/sh, listed among primary's files.
DISTRO_PRIMARY = """<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common"
  xmlns:rpm="http://linux.duke.edu/metadata/rpm" packages="1">
<package type="rpm">
  <name>bash</name><arch>x86_64</arch><version epoch="0" ver="5.1.8" rel="9.el9"/>
  <format>
    <rpm:provides><rpm:entry name="bash" flags="EQ" epoch="0" ver="5.1.8" rel="9.el9"/>
    </rpm:provides>
    <rpm:requires><rpm:entry name="rpmlib(BuiltinLuaScripts)" flags="LE" epoch="0"
      ver="4.2.2" rel="1"/></rpm:requires>
    <file>/bin/sh</file><file>/usr/bin/bash</file>
  </format>
</package>
</metadata>
"""


def test_dnf_repodata_closure_from_the_labs_createrepo_output(tmp_path):
    """The lab's el9 repository as createrepo_c wrote it (repomd.xml -> primary.xml.gz):
    exact NEVRA pins with epochs, the file dependency /bin/sh named until a repository
    that ships it is given too."""
    proc = gpuboot(
        "mirror",
        "--stack",
        "lts-550-cuda12.4",
        "--os-family",
        "redhat",
        "--repo",
        str(EL9),
        "--json",
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    chosen = {p["name"]: p["version"] for p in doc["packages"]}
    assert chosen["nvidia-driver"] == "3:550.54.15-1.el9"  # not 550.127.08, also served
    assert chosen["datacenter-gpu-manager"] == "1:3.3.9-1"
    needs = {(u["package"], u["needs"]) for u in doc["unsatisfied"]}
    assert ("nvidia-fabric-manager", "/bin/sh") in needs
    assert any("provides the file /bin/sh" in u["reason"] for u in doc["unsatisfied"])
    assert ("kernel", "kernel (= 5.14.0-427.13.1.el9_4)") in needs  # the lab serves none
    distro = tmp_path / "primary.xml"
    distro.write_text(DISTRO_PRIMARY)
    both = json.loads(
        gpuboot(
            "mirror",
            "--stack",
            "lts-550-cuda12.4",
            "--os-family",
            "redhat",
            "--repo",
            str(EL9),
            "--repo",
            str(distro),
            "--json",
        ).stdout
    )
    assert not [u for u in both["unsatisfied"] if u["needs"] == "/bin/sh"]
    bash = next(p for p in both["packages"] if p["name"] == "bash")
    assert bash["provides_for"] == ["/bin/sh"] and "nvidia-fabric-manager" in bash["required_by"]
