"""EL's installonly kernel packages (listed once per installed version) and the driver
stream's installed profile, read from real outputs (tests/fixtures/captures/SOURCES-extra.md:
a RHEL 8.9 node's `rpm -qa --queryformat` with two kernels; real rpm 4.18 / dnf 4.14 in an
--installroot), and STK-002 and the upgrade plan judging them."""

from __future__ import annotations

import pytest

from gpuboot.ansible.collections.ansible_collections.gpuboot.node.plugins.module_utils.rpm import (
    RpmParseError,
    parse_module_profiles,
)
from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext
from gpuboot.evidence.packages import (
    installed_profiles,
    installed_rpm_versions,
    parse_module_list,
    parse_rpm_query,
    split_nevr,
    with_locks,
)
from gpuboot.stacks import compare, load_stack, role_vars

RHEL8 = "rpm/rpm_-qa_--queryformat_EPOCHNUM.rhel8-two-kernels.txt"
OLD, NEW = "4.18.0-477.27.1.el8_8", "4.18.0-513.24.1.el8_9"


def test_every_installed_version_of_an_installonly_name_is_kept(read):
    packages = parse_rpm_query(read(RHEL8))
    for name in ("kernel", "kernel-core", "kernel-modules", "kernel-debug-modules-extra"):
        assert set(packages[name].versions) == {OLD, NEW}, name
    assert packages["kernel-tools"].versions == (NEW,)  # not installonly: one version
    versions = installed_rpm_versions(read(RHEL8))
    assert versions["kernel-core"] == (OLD, NEW)  # oldest first, as rpm orders them
    assert versions["kernel-tools"] == NEW


def test_a_lock_shows_the_kernel_at_the_locked_version_and_only_one_lock_holds_it(read):
    packages = parse_rpm_query(read(RHEL8))
    for locked in (OLD, NEW):
        seen = with_locks(packages, [f"kernel-core-0:{locked}.*"])["kernel-core"]
        assert (seen.version, seen.held) == (locked, True)
    both = [f"kernel-core-0:{OLD}.*", f"kernel-core-0:{NEW}.*"]
    assert not with_locks(packages, both)["kernel-core"].held  # which one is pinned?
    assert not with_locks(packages, [])["kernel-core"].held


def test_real_rpm_listing_two_kernels_installed_side_by_side(read):
    listing = read("rpm/rpm_-qa_--qf.rpm4.18-installroot-two-kernels.txt")
    core = parse_rpm_query(listing)["kernel-core"]
    assert set(core.versions) == {"5.14.0-427.13.1.el9_4", "5.14.0-362.8.1.el9_3"}


def test_the_fm_profile_dnf_marks_installed(read):
    listing = read("dnf/dnf_module_list_--enabled.fm-installed.dnf4.14-installroot.txt")
    (row,) = parse_module_list(listing)
    assert (row.stream, row.profiles, row.installed) == ("550-open", ("default", "fm"), ("fm",))
    assert installed_profiles(listing) == {"nvidia-driver": ("fm",)}
    before = read("dnf/dnf_module_list_--enabled.dnf4.14-installroot.txt")
    assert installed_profiles(before) == {"nvidia-driver": ()}


def test_the_packages_each_profile_installs(read):
    profiles = parse_module_profiles(read("dnf/dnf_module_info_--profile.dnf4.14-installroot.txt"))
    assert profiles == {
        "default": ("nvidia-driver", "nvidia-driver-cuda"),
        "fm": (
            "libnvidia-nscq-550",
            "nvidia-driver",
            "nvidia-driver-cuda",
            "nvidia-fabric-manager",
        ),
    }
    with pytest.raises(RpmParseError):
        parse_module_profiles("Error: No matching Modules to list\n")


# ---------------------------------------------------------------- STK-002 on the kernel
STACK = load_stack("lts-550-cuda12.4")
EL_VARS = {**role_vars(STACK, "redhat"), "gpuboot_os_family": "redhat"}
KERNEL = EL_VARS["kernel_package_version"]  # 5.14.0-427.13.1.el9_4
OLDER, NEWER = "5.14.0-362.8.1.el9_3", "5.14.0-503.15.1.el9_5"
MODULES = (
    "gpuboot\nName          Stream       Profiles        Summary\n"
    "nvidia-driver 550-open [e] default, fm [i] NVIDIA driver 550 open\n\n"
    "Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled\n"
)


def _node(kernels: dict[str, tuple[str, ...]], locks: dict[str, str], modules=MODULES):
    """Evidence of an el9 node holding every stack pin installed and locked, but the
    packages named in ``kernels`` (installed in those versions) and ``locks`` (locked there)."""
    rpm, lock = ["redhat-release 0 9.4 0.5.el9 noarch"], []
    for var in [k for k in EL_VARS if k.endswith("_packages") and k != "kernel_hold_packages"]:
        for spec in EL_VARS[var]:
            name, version = split_nevr(spec)
            for v in kernels.get(name, (version,)) if var == "kernel_packages" else (version,):
                e, _, rest = v.rpartition(":")
                ver, rel = rest.rsplit("-", 1)
                rpm.append(f"{name} {e or 0} {ver} {rel} x86_64")
            held = locks.get(name, version)
            if held:
                e, _, rest = held.rpartition(":")
                lock.append(f"{name}-{e or 0}:{rest}.*")
    return {
        n: ProbeOutput(t, "", 0)
        for n, t in {
            "rpm_-qa.txt": "\n".join(rpm) + "\n",
            "dnf_versionlock_list.txt": "\n".join(lock) + "\n",
            "dnf_module_list_--enabled.txt": modules,
        }.items()
    }


def _stk002(evidence):
    ctx = NodeContext("el1", {"hardware": {}}, EL_VARS)
    (finding,) = rules.evaluate(evidence, ctx, only=["STK-002"])
    return finding


def test_the_pinned_kernel_locked_beside_an_older_one_passes():
    finding = _stk002(_node({"kernel-core": (KERNEL, OLDER)}, {"kernel-core": KERNEL}))
    assert finding.status == "PASS", finding.reason


def test_the_kernel_locked_at_the_older_one_or_a_newer_one_beside_it_fails():
    at_older = _stk002(_node({"kernel-core": (OLDER, KERNEL)}, {"kernel-core": OLDER}))
    assert at_older.status == "FAIL" and "not held: kernel-core" in at_older.reason
    beside = _stk002(_node({"kernel-core": (KERNEL, NEWER)}, {"kernel-core": KERNEL}))
    assert beside.status == "FAIL"
    assert f"a newer version installed beside the pin: kernel-core {NEWER}" in beside.reason
    gone = _stk002(_node({"kernel-core": (OLDER,)}, {"kernel-core": OLDER}))
    assert f"moved: kernel-core {OLDER} (pinned {KERNEL})" in gone.reason


def test_another_profile_installed_than_the_stacks_fm_fails():
    default = MODULES.replace("default, fm [i]", "default [i], fm")
    finding = _stk002(_node({}, {}, modules=default))
    assert finding.status == "FAIL"
    assert "nvidia-driver:550-open/default installed, pinned nvidia-driver:550-open/fm" in (
        finding.reason
    )


# ---------------------------------------------------------------- the upgrade plan
def test_a_kernel_beside_other_kernels_plans_install_or_keep_never_a_downgrade():
    installed = {"kernel-core": (KERNEL, NEWER)}
    (core,) = [i for i in compare(installed, STACK, "redhat") if i.package == "kernel-core"]
    assert (core.action, core.current) == ("keep", f"{KERNEL}, {NEWER}")
    (core,) = [
        i for i in compare({"kernel-core": NEWER}, STACK, "redhat") if i.package == "kernel-core"
    ]
    assert (core.action, core.reboot) == ("install", True)  # beside 503: not a downgrade


def test_an_nvswitch_stack_installs_the_driver_stream_with_the_fm_profile():
    assert EL_VARS["nvidia_driver_module_profile"] == "fm"
    pcie = role_vars(load_stack("prod-570-cuda12.8-pcie"), "redhat")
    assert pcie["nvidia_driver_module_profile"] == ""
    assert "nvidia_driver_module_profile" not in role_vars(STACK, "debian")
