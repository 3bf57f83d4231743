"""pinned_packages' dnf backend against REAL dnf 4 / rpm 4 (as test_dnf_backend.py, whose
node it reuses): the driver stream installed with NVIDIA's NVSwitch profile (`fm`: the
driver, fabric manager and NSCQ, `dnf module install nvidia-driver:<stream>/fm` in NVIDIA's
driver installation guide) at exactly the pinned versions while the stream offers newer
ones; and EL's installonly kernel packages, two versions side by side."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuboot.ansible.collections.ansible_collections.gpuboot.node.plugins.module_utils.rpm import (
    QUERY_FORMAT,
)
from gpuboot.evidence.packages import parse_rpm_query, with_locks
from tests.unit.ansible import test_dnf_backend as base

pytestmark = base.pytestmark
D_OLD, D_NEW = "3:550.54.15-1.el9", "3:550.144.03-1.el9"  # NEW: the stream's latest (bait)
F_OLD, F_NEW = "550.54.15-1", "550.144.03-1"
K362, K427 = "5.14.0-362.8.1.el9_3", "5.14.0-427.13.1.el9_4"
PACKAGES = (  # name, epoch, version-release, provides
    ("redhat-release", 0, "9.4-0.5.el9", ""),
    *(
        (n, 3, v, "")
        for n in ("nvidia-driver", "nvidia-driver-cuda")
        for v in ("550.54.15-1.el9", "550.144.03-1.el9")
    ),
    *(
        (n, 0, v, "")
        for n in ("nvidia-fabric-manager", "libnvidia-nscq-550")
        for v in (F_OLD, F_NEW)
    ),
    # RHEL's kernel-core provides installonlypkg(kernel): dnf installs it beside, never over
    *(("kernel-core", 0, v, "installonlypkg(kernel)") for v in (K362, K427)),
)
DEFAULT = ["nvidia-driver", "nvidia-driver-cuda"]
STREAM = f"""---
document: modulemd
version: 2
data:
  name: nvidia-driver
  stream: "550-open"
  version: 1
  context: "00000000"
  arch: noarch
  summary: NVIDIA driver 550 open
  description: test stream
  license: {{module: [MIT]}}
  profiles:
    default: {{rpms: {DEFAULT}}}
    fm: {{rpms: {[*DEFAULT, "libnvidia-nscq-550", "nvidia-fabric-manager"]}}}
  artifacts:
    rpms: {[f"{n}-{e}:{v}.noarch" for n, e, v, _ in PACKAGES if n.startswith(("nvidia", "lib"))]}
...
"""
FM_PINS = [
    f"nvidia-driver-{D_OLD}",
    f"nvidia-driver-cuda-{D_OLD}",
    f"nvidia-fabric-manager-{F_OLD}",
    f"libnvidia-nscq-550-{F_OLD}",
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The signed repository (one key for the packages and repomd.xml)."""
    defines = []
    for name, epoch, vr, provides in PACKAGES:
        version, release = vr.split("-")
        defines.append({"pname": name, "pver": version, "prel": release, "pepoch": epoch})
        defines[-1] |= {"pprov": provides} if provides else {}
    return base.signed_repo(tmp_path_factory.mktemp("elrepo-fm"), base.SPEC, defines, STREAM)


@pytest.fixture
def node(tmp_path, repo) -> Iterator[base.Node]:
    yield (made := base.Node(tmp_path / "node", repo))
    made.close()


def _installed(node: base.Node) -> list[str]:
    """Every installed package as name-version (rpm -qa: installonly ones more than once)."""
    query = "%{NAME}-%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n"
    out = base._run([str(node.root / "bin" / "rpm"), "-qa", "--qf", query])
    skip = ("gpg-pubkey-", "redhat-release-")
    return sorted(line.replace("-0:", "-") for line in out.split() if not line.startswith(skip))


def test_the_nvswitch_profile_installs_the_pinned_versions_not_the_streams_latest(node):
    out = node.pins(FM_PINS, module_stream="nvidia-driver:550-open", module_profile="fm")
    assert out.get("changed") is True and not out.get("failed"), out
    assert out["streams"] == ["nvidia-driver:550-open/fm"], out
    assert _installed(node) == sorted(FM_PINS)  # 550.144.03 is the stream's latest: not taken
    assert len(node.locks()) == 4
    listing = node.dnf("module", "list", "--installed")
    assert "550-open [e]" in listing and "fm [i]" in listing, listing
    again = node.pins(FM_PINS, module_stream="nvidia-driver:550-open", module_profile="fm")
    assert again["changed"] is False, again
    node.dnf("upgrade")
    assert _installed(node) == sorted(FM_PINS)


def test_check_mode_names_the_profile_and_installs_nothing(node):
    out = node.pins(
        FM_PINS, check=True, module_stream="nvidia-driver:550-open", module_profile="fm"
    )
    assert out["changed"] is True and out["streams"] == ["nvidia-driver:550-open/fm"], out
    assert out["diff"][2]["after"] == "nvidia-driver:550-open/fm\n", out["diff"]
    assert _installed(node) == [] and node.locks() == []


def test_a_profile_package_no_pin_names_is_refused_before_anything_runs(node):
    out = node.pins(FM_PINS[:2], module_stream="nvidia-driver:550-open", module_profile="fm")
    assert out.get("failed"), out
    assert "libnvidia-nscq-550, nvidia-fabric-manager" in out["msg"], out["msg"]
    assert _installed(node) == []


def test_a_kernel_pin_installs_beside_the_installed_kernel_and_locks_it(node):
    node.dnf("install", f"kernel-core-{K362}")
    out = node.pins([f"kernel-core-{K427}"])
    assert out["installed"] == [f"kernel-core-{K427}"] and out["removed"] == [], out
    assert _installed(node) == [f"kernel-core-{K362}", f"kernel-core-{K427}"]
    assert node.locks() == [f"kernel-core-0:{K427}.*"]
    # the controller's reader (STK-002, plan) keeps both, seen at the locked one
    listing = base._run([str(node.root / "bin" / "rpm"), "-qa", "--qf", QUERY_FORMAT])
    seen = with_locks(parse_rpm_query(listing), node.locks())["kernel-core"]
    assert (seen.version, seen.held, set(seen.versions)) == (K427, True, {K362, K427})
    again = node.pins([f"kernel-core-{K427}"])
    assert again["changed"] is False, again


def test_pinning_either_of_two_installed_kernels_only_moves_the_lock(node):
    node.dnf("install", f"kernel-core-{K362}", f"kernel-core-{K427}")
    newer = node.pins([f"kernel-core-{K427}"])
    assert (newer["installed"], newer["held"]) == ([], ["kernel-core"]), newer
    older = node.pins([f"kernel-core-{K362}"])  # the running one, say: no downgrade
    assert (older["installed"], older["removed"]) == ([], []) and older["changed"], older
    assert _installed(node) == [f"kernel-core-{K362}", f"kernel-core-{K427}"]
    assert node.locks() == [f"kernel-core-0:{K362}.*"]
    assert node.pins([f"kernel-core-{K362}"])["changed"] is False
