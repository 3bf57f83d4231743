"""The lab's signed RPM repositories: built from packages.yaml with rpmbuild, rpmsign,
createrepo_c and modifyrepo_c, checked with rpm -qp / rpm -K / gpgv and modules.yaml."""

from __future__ import annotations

import dataclasses
import gzip
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuboot.errors import ConfigError
from gpuboot.stacks import load_stack
from gpuboot_lab.catalogue import Catalogue, load_catalogue, parse_catalogue
from gpuboot_lab.rpmrepo import RpmRepoInfo, build_rpm_repo, nevra, rpm_filename
from gpuboot_lab.stacks import check_served

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

TOOLS = ("rpm", "rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c", "gpg", "gpgv")
MISSING = [t for t in TOOLS if shutil.which(t) is None]
needs_tools = pytest.mark.skipif(
    bool(MISSING), reason=f"missing {MISSING}: apt-get install rpm createrepo-c gnupg"
)
STACKS = ("lts-550-cuda12.4", "prod-570-cuda12.8", "prod-570-cuda12.8-pcie", "new-580-cuda13.0")
BRANCHES = ("535", "550", "570", "580")
DRIVER_550 = "3:550.54.15-1.el9"


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue()


@pytest.fixture(scope="module")
def gnupghome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("gnupg")
    yield home
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True)


@pytest.fixture(scope="module")
def rpmrepo(tmp_path_factory: pytest.TempPathFactory, gnupghome: Path) -> RpmRepoInfo:
    if MISSING:
        pytest.skip(f"missing {MISSING}")
    return build_rpm_repo(tmp_path_factory.mktemp("repo") / "rpm", gnupghome)


def _rpm(repo: RpmRepoInfo, cat: Catalogue, name: str, version: str) -> Path:
    pkg = next(p for p in cat.rpms if p.name == name and p.version == version)
    return repo.out_dir / "Packages" / rpm_filename(pkg)


def _q(path: Path, *args: str) -> str:
    return subprocess.run(
        ["rpm", "-qp", *args, str(path)], check=True, capture_output=True, text=True
    ).stdout


def _modules(tree: Path) -> list[dict]:
    repomd = (tree / "repodata" / "repomd.xml").read_text()
    href = re.search(r'<data type="modules">.*?<location href="([^"]+)"', repomd, re.S)
    assert href, "repomd.xml lists no modules metadata"
    return list(yaml.safe_load_all(gzip.decompress((tree / href.group(1)).read_bytes())))


# ------------------------------------------------------------------ catalogue


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_redhat_pin_is_served_as_an_rpm(stack: str) -> None:
    """LAB-001 for EL nodes: the stacks' redhat names/versions (but the kernel) exist."""
    assert check_served(load_stack(stack), family="redhat") == []


def test_lab_refuses_a_redhat_pin_it_does_not_serve_on_el_nodes_only() -> None:
    stack = load_stack("lts-550-cuda12.4")
    pins = dataclasses.replace(stack.cuda.pins["redhat"], version="12.4.0-1")
    cuda = dataclasses.replace(stack.cuda, pins={**stack.cuda.pins, "redhat": pins})
    bad = dataclasses.replace(stack, cuda=cuda)
    (violation,) = check_served(bad, family="redhat")
    assert violation.rule_id == "LAB-001" and violation.where.endswith("cuda.redhat")
    assert "cuda-toolkit-12-4=12.4.0-1" in violation.message and "12.4.1-1" in violation.fix
    assert check_served(bad, family="debian") == []


def test_rpms_carry_nvidia_rhel_names_and_epoch(catalogue: Catalogue) -> None:
    rpms = {(p.name, p.version): p for p in catalogue.rpms}
    for name in (
        "nvidia-driver",
        "nvidia-driver-libs",
        "nvidia-driver-cuda",
        "nvidia-driver-cuda-libs",
        "nvidia-kmod-common",
        "kmod-nvidia-open-dkms",
        "kmod-nvidia-latest-dkms",
        "nvidia-persistenced",
        "nvidia-modprobe",
    ):
        assert rpms[(name, DRIVER_550)].evr == ("3", "550.54.15", "1.el9")
    assert ("nvidia-fabric-manager", "550.54.15-1") in rpms
    assert ("nvidia-fabricmanager", "580.82.07-1") in rpms  # R580 drops the branch
    assert ("libnvidia-nscq", "580.82.07-1") in rpms
    assert ("nvidia-imex-570", "570.133.20-1") in rpms
    assert ("nvidia-imex", "580.82.07-1") in rpms  # R580 drops the branch here too
    assert ("datacenter-gpu-manager", "1:3.3.9-1") in rpms
    # Debian-only metas have no rpm; rpm-only packages no deb.
    names = {p.name for p in catalogue.rpms}
    assert "nvidia-driver-550-open" not in names and "nvidia-utils-550" not in names
    assert "nvidia-kmod-common" not in {p.name for p in catalogue.packages}
    # The same emulated payload as the deb: the kmod carries the open modules.
    kmod = rpms[("kmod-nvidia-open-dkms", DRIVER_550)]
    assert kmod.modules["nvidia"]["flavor"] == "open"
    assert kmod.modules["nvidia"]["package"] == "kmod-nvidia-open-dkms"
    assert kmod.streams == ("550-open",)


_MINI = """\
schema: 1
suite: s
component: main
architecture: amd64
maintainer: m <m@x.invalid>
script_prologue: |
  #!/bin/sh
  set -e
packages:
  - name: foo
    versions: ["1.0-1"]
    summary: foo
    depends: [bar (>= 2.0-1), baz (<< 3)]
    conflicts: [qux]
    breaks: [old (<= 1)]
"""


def test_debian_relations_in_rpm_spelling_unless_redhat_gives_them() -> None:
    (foo,) = parse_catalogue(_MINI).rpms
    assert foo.relations == {
        "requires": ["bar >= 2.0-1", "baz < 3"],
        "conflicts": ["qux", "old <= 1"],
    }
    text = _MINI + "    redhat: {name: foo-el, version: '2:@upstream@-3.el9', requires: []}\n"
    (el,) = parse_catalogue(text).rpms
    assert (el.name, el.version, el.relations) == ("foo-el", "2:1.0-3.el9", {})
    assert parse_catalogue(_MINI + "    redhat: false\n").rpms == []
    with pytest.raises(ConfigError, match="redhat"):
        parse_catalogue(_MINI + "    redhat: {epoch: 3}\n")


# ------------------------------------------------------------------ the built repository


@needs_tools
def test_rpms_have_the_catalogue_relations(rpmrepo: RpmRepoInfo, catalogue: Catalogue) -> None:
    kmod = _rpm(rpmrepo, catalogue, "kmod-nvidia-open-dkms", DRIVER_550)
    assert "nvidia-kmod = 3:550.54.15-1.el9" in _q(kmod, "--provides").splitlines()
    assert "kmod-nvidia-latest-dkms" in _q(kmod, "--conflicts").splitlines()
    assert "/lib/modules/gpuemu/nvidia.ko" in _q(kmod, "--list").splitlines()
    driver = _rpm(rpmrepo, catalogue, "nvidia-driver", DRIVER_550)
    assert _q(driver, "--qf", "%{EPOCH}:%{VERSION}-%{RELEASE}") == DRIVER_550
    assert "nvidia-kmod = 3:550.54.15-1.el9" in _q(driver, "--requires").splitlines()
    # Only what the catalogue says: no generated file dependencies.
    doca = _rpm(rpmrepo, catalogue, "doca-ofed", "2.9.1-018000")
    assert not [r for r in _q(doca, "--requires").splitlines() if r.startswith("/usr")]
    config = _q(doca, "--configfiles").splitlines()
    assert config == ["/etc/infiniband/openib.conf", "/etc/init.d/openibd"]


@needs_tools
def test_scriptlets_map_rpm_count_to_debian_arguments(
    rpmrepo: RpmRepoInfo, catalogue: Catalogue
) -> None:
    rpm = _rpm(rpmrepo, catalogue, "nvidia-persistenced", DRIVER_550)
    scripts = _q(rpm, "--scripts")
    sections = dict(
        re.findall(
            r"^(\w+) scriptlet \(using /bin/sh\):\n(.*?)(?=^\w+ scriptlet|\Z)", scripts, re.M | re.S
        )
    )
    assert set(sections) == {"postinstall", "preuninstall", "postuninstall"}
    post = sections["postinstall"]
    assert 'if [ "$1" -gt 1 ]; then set -- configure old; else set -- configure ""; fi' in post
    assert "RPM_PACKAGE=nvidia-persistenced" in post  # %{name} expanded, nothing else
    assert "systemctl --no-reload preset" in post and "deb-systemd-helper" not in post
    assert 'if [ "$1" -eq 0 ]; then set -- remove;' in sections["preuninstall"]
    postun = sections["postuninstall"]
    assert postun.index("set -- remove") < postun.index("set -- purge")
    for text in sections.values():
        subprocess.run(["sh", "-n"], input=text, text=True, check=True)


@needs_tools
def test_every_rpm_is_signed_by_the_lab_key(rpmrepo: RpmRepoInfo, tmp_path: Path) -> None:
    rpms = sorted((rpmrepo.out_dir / "Packages").glob("*.rpm"))
    assert len(rpms) == len(rpmrepo.rpms)
    db = tmp_path / "rpmdb"

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["rpm", "--dbpath", str(db), "-K", *map(str, rpms)], capture_output=True, text=True
        )

    subprocess.run(["rpm", "--dbpath", str(db), "--initdb"], check=True)
    unknown = check()
    assert unknown.returncode != 0 and "SIGNATURES NOT OK" in unknown.stdout
    subprocess.run(
        ["rpm", "--dbpath", str(db), "--import", str(rpmrepo.public_key_path)], check=True
    )
    known = check()
    assert known.returncode == 0, known.stdout + known.stderr
    assert known.stdout.count("digests signatures OK") == len(rpms)


@needs_tools
def test_repomd_has_a_detached_signature(rpmrepo: RpmRepoInfo, tmp_path: Path) -> None:
    keyring = tmp_path / "lab.gpg"
    subprocess.run(
        ["gpg", "--batch", "--dearmor", "-o", str(keyring), str(rpmrepo.public_key_path)],
        check=True,
    )
    for major in ("8", "9", "10"):
        repodata = rpmrepo.tree(major) / "repodata"
        ok = subprocess.run(
            [
                "gpgv",
                "--keyring",
                str(keyring),
                repodata / "repomd.xml.asc",
                repodata / "repomd.xml",
            ],
            capture_output=True,
        )
        assert ok.returncode == 0, ok.stderr
        tampered = tmp_path / f"repomd-{major}.xml"
        tampered.write_text(
            (repodata / "repomd.xml").read_text().replace("<revision>", "<revision>1")
        )
        bad = subprocess.run(
            ["gpgv", "--keyring", str(keyring), repodata / "repomd.xml.asc", tampered],
            capture_output=True,
        )
        assert bad.returncode != 0


@needs_tools
def test_modules_yaml_has_the_driver_streams(rpmrepo: RpmRepoInfo) -> None:
    docs = _modules(rpmrepo.tree("9"))
    streams = {d["data"]["stream"]: d["data"] for d in docs}
    assert set(streams) == {f"{b}-{f}" for b in BRANCHES for f in ("open", "dkms")}
    assert {d["document"] for d in docs} == {"modulemd"}
    s550 = streams["550-open"]
    assert s550["name"] == "nvidia-driver"
    artifacts = s550["artifacts"]["rpms"]
    for version in ("550.54.15", "550.127.08", "550.144.03"):  # every release of the branch
        assert f"nvidia-driver-3:{version}-1.el9.x86_64" in artifacts
        assert f"kmod-nvidia-open-dkms-3:{version}-1.el9.x86_64" in artifacts
    assert "nvidia-fabric-manager-0:550.54.15-1.x86_64" in artifacts
    assert not [a for a in artifacts if "latest-dkms" in a or "570." in a]
    assert (
        "kmod-nvidia-latest-dkms-3:550.54.15-1.el9.x86_64"
        in (streams["550-dkms"]["artifacts"]["rpms"])
    )
    assert set(s550["profiles"]) == {"default", "ks", "fm"}
    # NVIDIA's default profile: every driver package of the branch and the stream's kmod
    # (tests/unit/gpuboot_lab/test_rpmrepo_profiles.py checks every stream's profiles)
    default = s550["profiles"]["default"]["rpms"]
    assert {"kmod-nvidia-open-dkms", "nvidia-driver", "nvidia-driver-cuda"} <= set(default)
    assert set(s550["profiles"]["fm"]["rpms"]) == {
        *default,
        "nvidia-fabric-manager",
        "libnvidia-nscq-550",
    }
    fm580 = streams["580-open"]["profiles"]["fm"]["rpms"]
    assert {"nvidia-fabricmanager", "libnvidia-nscq"} <= set(fm580)
    assert _modules(rpmrepo.tree("8")) == docs
    # EL10 has no modularity: plain packages, pinned by versionlock.
    assert 'type="modules"' not in (rpmrepo.tree("10") / "repodata" / "repomd.xml").read_text()


@needs_tools
def test_artifacts_name_the_built_rpms(rpmrepo: RpmRepoInfo, catalogue: Catalogue) -> None:
    built = {
        _q(p, "--qf", "%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}")
        for p in (rpmrepo.out_dir / "Packages").glob("*.rpm")
    }
    assert {nevra(p) for p in catalogue.rpms} == built
    listed = {a for d in _modules(rpmrepo.tree("9")) for a in d["data"]["artifacts"]["rpms"]}
    assert listed <= built


@needs_tools
def test_an_unchanged_catalogue_is_not_rebuilt(rpmrepo: RpmRepoInfo, gnupghome: Path) -> None:
    again = build_rpm_repo(rpmrepo.out_dir, gnupghome)
    assert again.rebuilt is False
    assert again.fingerprint == rpmrepo.fingerprint
