"""pinned_packages' dnf backend against REAL dnf 4 and rpm 4 (Debian's, the versions RHEL 9
ships): each test's node is an --installroot with its own rpm database, dnf configured
against a GPG-signed local repository (gpgcheck=1, repo_gpgcheck=1) that this file builds
with rpmbuild, rpmsign, createrepo_c and modifyrepo_c, with the nvidia-driver module's
550-open and 570-open streams in modules.yaml. The module runs as Ansible runs it on a node,
`dnf` and `rpm` on its PATH being wrappers that add the installroot and log their argv."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.ansible.modrun import run_module

TOOLS = ("dnf", "rpm", "rpmbuild", "rpmsign", "createrepo_c", "modifyrepo_c", "gpg")
pytestmark = [
    pytest.mark.subprocess,  # rpmbuild, createrepo_c, gpg: not in the pure tier
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in TOOLS) or not Path("/usr/bin/dnf").exists(),
        reason="dnf, rpm and createrepo-c not installed (make setup installs them)",
    ),
]
MODULES = "ansible_collections.gpuboot.node.plugins.modules"
D550, D570 = "3:550.54.15-1.el9", "3:570.124.06-1.el9"
PACKAGES = (  # name, epoch, version, release
    ("nvidia-driver", 3, "550.54.15", "1.el9"),
    ("nvidia-driver", 3, "570.124.06", "1.el9"),
    ("cuda-toolkit-12-4", 0, "12.4.1", "1"),
    ("cuda-toolkit-12-8", 0, "12.8.1", "1"),
    ("datacenter-gpu-manager", 1, "3.3.9", "1"),
    ("datacenter-gpu-manager", 1, "3.3.10", "1"),  # newer than the pin: `upgrade` bait
    ("redhat-release", 0, "9.4", "0.5.el9"),  # every EL node has packages: the base
)
SPEC = """Name: %{pname}
Version: %{pver}
Release: %{prel}
Epoch: %{pepoch}
Summary: gpuboot test package
License: MIT
BuildArch: noarch
%{?pprov:Provides: %{pprov}}
%description
An empty package of the gpuboot dnf backend tests.
%files
"""
STREAM = """---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: "{branch}-open"
  version: 1
  context: "00000000"
  arch: noarch
  summary: NVIDIA driver {branch} open
  description: test stream
  license: {{module: [MIT]}}
  profiles:
    default: {{rpms: [nvidia-driver]}}
    fm: {{rpms: [nvidia-driver]}}
  artifacts:
    rpms: ["nvidia-driver-{evr}.noarch"]
...
"""
# Debian's rpm keeps its database in ~/.rpmdb (%_dbpath): one HOME for every call on a node
WRAP = """#!/bin/sh
export HOME={root}/home
printf '%s\\n' "$(basename "$0") $*" >> {root}/calls.log
exec /usr/bin/{tool} {args} "$@"
"""


def _run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
    assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
    return proc.stdout


def signed_repo(root: Path, spec: str, packages: list[dict], modules_yaml: str) -> Path:
    """A repository in ``root/repo`` as a node's dnf checks it: one rpm per defines of
    ``packages`` (built from ``spec``, signed by rpmsign), createrepo_c, ``modules_yaml``
    added by modifyrepo_c, repomd.xml with a detached signature; its key in root/key.asc.
    gpg's agent is stopped once signing is done (no process outlives the build)."""
    home = root / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gen = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    gen += ["--quick-gen-key", "gpuboot test <test@gpuboot.invalid>", "rsa2048", "sign", "never"]
    try:
        _run(gen, env=env)
        (root / "key.asc").write_text(_run(["gpg", "--armor", "--export"], env=env))
        (root / "p.spec").write_text(spec)
        for defines in packages:
            argv = ["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {root / 'top'}"]
            for key, value in defines.items():
                argv += ["--define", f"{key} {value}"]
            _run([*argv, str(root / "p.spec")], env=env)
        rpms = sorted(str(p) for p in (root / "top" / "RPMS" / "noarch").glob("*.rpm"))
        sign = ["rpmsign", "--addsign", "--define", "_gpg_name gpuboot test"]
        _run([*sign, "--define", "__gpg /usr/bin/gpg", *rpms], env=env)
        served = root / "repo"
        served.mkdir()
        for path in rpms:
            shutil.copy(path, served)
        _run(["createrepo_c", "-q", str(served)])
        (root / "modules.yaml").write_text(modules_yaml)
        repodata = served / "repodata"
        _run(["modifyrepo_c", "--mdtype=modules", str(root / "modules.yaml"), str(repodata)])
        detached = ["gpg", "--batch", "--yes", "--detach-sign", "--armor"]
        _run([*detached, str(repodata / "repomd.xml")], env=env)
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    return root


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The signed repository: packages signed by rpmsign, repomd.xml by a detached
    signature, one key for both."""
    defines = [
        {"pname": name, "pver": version, "prel": release, "pepoch": epoch}
        for name, epoch, version, release in PACKAGES
    ]
    streams = "".join(STREAM.format(branch=b, evr=e) for b, e in (("550", D550), ("570", D570)))
    return signed_repo(tmp_path_factory.mktemp("elrepo"), SPEC, defines, streams)


class Node:
    """An EL node as dnf sees it: its own rpm database, dnf.conf, repo file and
    versionlock list under ``root``."""

    def __init__(self, root: Path, repo: Path):
        self.root = root
        etc = root / "etc"
        (etc / "yum.repos.d").mkdir(parents=True)
        (etc / "dnf" / "plugins").mkdir(parents=True)
        (etc / "dnf" / "dnf.conf").write_text(
            "[main]\ngpgcheck=1\ninstall_weak_deps=0\nmodule_platform_id=platform:el9\n"
            f"reposdir={etc / 'yum.repos.d'}\npluginconfpath={etc / 'dnf' / 'plugins'}\n"
            f"cachedir={root / 'var' / 'cache' / 'dnf'}\n"
        )
        (etc / "dnf" / "plugins" / "versionlock.conf").write_text(
            f"[main]\nenabled=1\nlocklist={etc / 'dnf' / 'plugins' / 'versionlock.list'}\n"
        )
        (etc / "dnf" / "plugins" / "versionlock.list").write_text("")
        # Its cache path is fixed (/var/cache/dnf/packages.db): the controller's, not the node's.
        (etc / "dnf" / "plugins" / "generate_completion_cache.conf").write_text(
            "[main]\nenabled=0\n"
        )
        (etc / "yum.repos.d" / "gpuboot-test.repo").write_text(
            f"[gpuboot-test]\nname=gpuboot test\nbaseurl=file://{repo / 'repo'}\n"
            f"gpgcheck=1\nrepo_gpgcheck=1\ngpgkey=file://{repo / 'key.asc'}\n"
        )
        (root / "bin").mkdir()
        args = {
            "dnf": f"--installroot={root} -c {etc / 'dnf' / 'dnf.conf'} --releasever=9",
            "rpm": f"--root {root}",
        }
        for tool, extra in args.items():
            exe = root / "bin" / tool
            exe.write_text(WRAP.format(root=root, tool=tool, args=extra))
            exe.chmod(0o755)
        _run([str(root / "bin" / "rpm"), "--initdb"])
        self.dnf("install", "redhat-release")  # imports the repository's key too

    def close(self) -> None:
        """Stop the gpg-agents dnf started for its repository keyrings (repo_gpgcheck)."""
        for keyring in self.root.rglob("pubring"):
            if keyring.is_dir():
                subprocess.run(["gpgconf", "--homedir", str(keyring), "--kill", "gpg-agent"])

    def pins(self, packages: list[str], check: bool = False, **args) -> dict:
        (self.root / "calls.log").write_text("")
        params = {"manager": "dnf", "packages": packages, **args}
        return run_module("pinned_packages", self.root, params, check=check, timeout=300)

    def dnf(self, *args: str) -> str:
        return _run([str(self.root / "bin" / "dnf"), "-q", "-y", *args])

    def installed(self) -> dict[str, str]:
        query = "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"
        out = _run([str(self.root / "bin" / "rpm"), "-qa", "--qf", query])
        rows = dict(line.split() for line in out.splitlines())
        base = ("gpg-pubkey", "redhat-release")
        return {n: v.removeprefix("0:") for n, v in rows.items() if n not in base}

    def locks(self) -> list[str]:
        return self.dnf("versionlock", "list").split()

    def calls(self) -> list[str]:
        return (self.root / "calls.log").read_text().splitlines()


@pytest.fixture
def node(tmp_path, repo) -> Iterator[Node]:
    yield (made := Node(tmp_path / "node", repo))
    made.close()


DCGM = "datacenter-gpu-manager-1:3.3.9-1"
CUDA = "cuda-toolkit-12-4-12.4.1-1"


def test_pins_install_exactly_lock_and_a_second_run_only_reads(node):
    first = node.pins([CUDA, DCGM])
    assert first.get("changed") is True, first
    assert first["installed"] == [CUDA, DCGM] and first["held"] == sorted(
        ["cuda-toolkit-12-4", "datacenter-gpu-manager"]
    )
    assert node.installed() == {
        "cuda-toolkit-12-4": "12.4.1-1",
        "datacenter-gpu-manager": "1:3.3.9-1",
    }
    assert sorted(node.locks()) == [
        "cuda-toolkit-12-4-0:12.4.1-1.*",
        "datacenter-gpu-manager-1:3.3.9-1.*",
    ]
    again = node.pins([CUDA, DCGM])
    assert again["changed"] is False, again
    assert [c.split()[0] for c in node.calls()] == ["rpm", "dnf"]  # the one read: rpm + lock list


def test_dnf_upgrade_moves_no_locked_package(node):
    node.pins([DCGM])
    node.dnf("upgrade")
    assert node.installed()["datacenter-gpu-manager"] == "1:3.3.9-1"


def test_a_pin_below_the_installed_version_is_a_downgrade(node):
    node.dnf("install", "datacenter-gpu-manager-1:3.3.10-1")
    out = node.pins([DCGM])
    assert out["installed"] == [DCGM] and out["changed"] is True
    assert node.installed()["datacenter-gpu-manager"] == "1:3.3.9-1"
    assert node.locks() == ["datacenter-gpu-manager-1:3.3.9-1.*"]


def test_a_superseded_release_is_removed_with_its_lock(node):
    node.pins([CUDA])
    out = node.pins(["cuda-toolkit-12-8-12.8.1-1"], supersede=["cuda-toolkit-[0-9]+-[0-9]+"])
    assert out["removed"] == ["cuda-toolkit-12-4"], out
    assert node.installed() == {"cuda-toolkit-12-8": "12.8.1-1"}
    assert node.locks() == ["cuda-toolkit-12-8-0:12.8.1-1.*"]


def test_the_driver_stream_switches_with_the_stack_up_and_down(node):
    first = node.pins([f"nvidia-driver-{D550}"], module_stream="nvidia-driver:550-open")
    assert first["streams"] == ["nvidia-driver:550-open"], first
    assert "550-open [e]" in node.dnf("module", "list", "--enabled")
    up = node.pins([f"nvidia-driver-{D570}"], module_stream="nvidia-driver:570-open")
    assert up["streams"] == ["nvidia-driver:570-open"] and up["changed"] is True, up
    assert node.installed() == {"nvidia-driver": D570}
    assert node.locks() == ["nvidia-driver-3:570.124.06-1.el9.*"]  # one entry: the old one went
    assert "570-open [e]" in node.dnf("module", "list", "--enabled")
    down = node.pins([f"nvidia-driver-{D550}"], module_stream="nvidia-driver:550-open")
    assert down["streams"] == ["nvidia-driver:550-open"], down
    assert node.installed() == {"nvidia-driver": D550}
    assert node.locks() == ["nvidia-driver-3:550.54.15-1.el9.*"]
    again = node.pins([f"nvidia-driver-{D550}"], module_stream="nvidia-driver:550-open")
    assert again["changed"] is False, again


def test_check_mode_names_every_change_with_a_diff_and_changes_nothing(node):
    node.pins([f"nvidia-driver-{D550}", CUDA], module_stream="nvidia-driver:550-open")
    before = (node.installed(), node.locks())
    out = node.pins(
        [f"nvidia-driver-{D570}", "cuda-toolkit-12-8-12.8.1-1"],
        check=True,
        module_stream="nvidia-driver:570-open",
        supersede=["cuda-toolkit-[0-9]+-[0-9]+"],
    )
    assert out["changed"] is True
    assert out["installed"] == [f"nvidia-driver-{D570}", "cuda-toolkit-12-8-12.8.1-1"]
    assert (out["removed"], out["streams"]) == (["cuda-toolkit-12-4"], ["nvidia-driver:570-open"])
    locks, packages, streams = out["diff"]
    assert locks["before"] == "cuda-toolkit-12-4-0:12.4.1-1.*\nnvidia-driver-3:550.54.15-1.el9.*\n"
    assert "nvidia-driver-0:3:570" not in locks["after"]
    assert locks["after"] == (
        "cuda-toolkit-12-8-0:12.8.1-1.*\nnvidia-driver-3:570.124.06-1.el9.*\n"
    )
    assert "cuda-toolkit-12-4 12.4.1-1 (superseded)" in packages["before"]
    assert (streams["before"], streams["after"]) == (
        "nvidia-driver:550-open\n",
        "nvidia-driver:570-open\n",
    )
    assert [c.split()[0] for c in node.calls()] == ["rpm", "dnf", "dnf"]  # read: rpm, lock, module
    assert (node.installed(), node.locks()) == before


def test_a_released_lock_is_restored_and_a_stale_one_replaced(node):
    node.pins([DCGM])
    node.dnf("versionlock", "delete", "datacenter-gpu-manager")
    node.dnf("versionlock", "add", "datacenter-gpu-manager-1:3.3.10-1")  # a stale entry
    out = node.pins([DCGM])
    assert out["held"] == ["datacenter-gpu-manager"] and out["installed"] == [], out
    assert node.locks() == ["datacenter-gpu-manager-1:3.3.9-1.*"]


def test_an_apt_pin_or_an_unknown_version_is_refused_before_anything_runs(node):
    out = node.pins(["datacenter-gpu-manager=1:3.3.9-1"])
    assert out.get("failed") and "name-[epoch:]version-release" in out["msg"], out
    missing = node.pins(["datacenter-gpu-manager-1:3.3.99-1"])
    assert missing.get("failed") and "3.3.99" in missing["msg"], missing
    assert node.installed() == {}


def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


def test_a_node_writes_nothing_in_the_controllers_dnf_cache(node):
    """dnf's completion-cache plugin writes a fixed path, whatever --installroot says."""
    controller_cache = Path("/var/cache/dnf/packages.db")
    before = _mtime(controller_cache)
    node.pins([DCGM])
    node.dnf("upgrade")
    assert _mtime(controller_cache) == before
