"""EL package evidence: the rpm / versionlock / module-list parsers (module_utils/rpm.py,
shared by the pinned_packages module and gpuboot.evidence.packages) on real published
outputs (tests/fixtures/captures/SOURCES-extra.md: rpm/, dnf/), and STK-001/002/003
judging an EL node from the files node_collect gathers for it."""

from __future__ import annotations

import json

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext
from gpuboot.collect import PROBES
from gpuboot.errors import ParseError
from gpuboot.evidence.packages import (
    DNF_AUTOMATIC_TIMERS,
    enabled_streams,
    installed_rpm_versions,
    parse_module_list,
    parse_rpm_query,
    parse_systemctl_show,
    parse_versionlock,
    split_nevr,
    with_locks,
)
from gpuboot.node_collect import EL_PACKAGE_PROBES, package_probes
from gpuboot.stacks import load_stack, role_vars


def test_rpm_query_of_a_rocky_8_node(read):
    packages = parse_rpm_query(read("rpm/rpm_-qa_--queryformat_EPOCHNUM.rocky8.txt"))
    assert len(packages) == 6
    pip = packages["python3-pip-wheel"]
    assert (pip.epoch, pip.version, pip.arch) == (0, "9.0.3-22.el8.rocky.0", "noarch")
    assert packages["crypto-policies"].version == "20211116-1.gitae470d6.el8"  # no epoch 0:


def test_rpm_query_with_epoch_none_is_refused_not_guessed(read):
    # %{EPOCH} prints "(none)" for most packages: not the format gpuboot asks for
    with pytest.raises(ParseError, match="not an rpm package line"):
        parse_rpm_query(read("rpm/rpm_-qa_--queryformat_EPOCH.rocky8.txt"))


def test_rpm_query_of_real_rpm_4_18_keeps_epochs_and_the_gpg_pubkey(read):
    versions = installed_rpm_versions(read("rpm/rpm_-qa_--qf.rpm4.18-installroot.txt"))
    assert versions["nvidia-driver"] == "3:550.54.15-1.el9"
    assert versions["cuda-toolkit-12-4"] == "12.4.1-1"
    assert "gpg-pubkey" in versions  # arch "(none)": rpm's imported keys


@pytest.mark.parametrize(
    ("capture", "entries"),
    [
        ("dnf/dnf_versionlock_list.fedora-terraform.txt", ["terraform-0:1.5.5-1.*"]),
        ("dnf/dnf_versionlock_list.fedora33-tcsh.txt", ["tcsh-0:6.20.00-9.fc31.*"]),
        (
            "dnf/dnf_versionlock_list.dnf4.14-installroot.txt",
            ["cuda-toolkit-12-4-0:12.4.1-1.*", "nvidia-driver-3:550.54.15-1.el9.*"],
        ),
    ],
)
def test_versionlock_list_without_dnf_noise(read, capture, entries):
    assert parse_versionlock(read(capture)) == entries


def test_a_lock_holds_only_the_installed_version(read):
    packages = parse_rpm_query(read("rpm/rpm_-qa_--qf.rpm4.18-installroot.txt"))
    locks = parse_versionlock(read("dnf/dnf_versionlock_list.dnf4.14-installroot.txt"))
    held = with_locks(packages, locks)
    assert held["nvidia-driver"].held and held["cuda-toolkit-12-4"].held
    assert not held["gpg-pubkey"].held
    stale = with_locks(packages, [*locks, "nvidia-driver-3:570.124.06-1.el9.*"])
    assert not stale["nvidia-driver"].held  # a second entry for another version blocks dnf
    assert not with_locks(packages, ["!nvidia-driver-3:550.54.15-1.el9.*"])["nvidia-driver"].held


def test_module_list_of_a_rhel_8_node_with_the_latest_stream_enabled(read):
    rows = parse_module_list(read("dnf/dnf_module_list_nvidia-driver.rhel8-latest-enabled.txt"))
    assert [(r.stream, r.enabled, r.default) for r in rows] == [
        ("latest", True, False),
        ("latest-dkms", False, False),
        ("open-dkms", False, True),
    ]
    assert rows[0].profiles == ("default", "fm", "ks", "src")
    assert enabled_streams(read("dnf/dnf_module_list_nvidia-driver.rhel8-latest-enabled.txt")) == {
        "nvidia-driver": "latest"
    }


def test_module_list_of_real_dnf_4_14_and_dnfs_none_answer(read):
    assert enabled_streams(read("dnf/dnf_module_list_--enabled.dnf4.14-installroot.txt")) == {
        "nvidia-driver": "550-open"
    }
    assert enabled_streams(read("dnf/dnf_module_list_nvidia-driver.no-repo.txt")) == {}
    with pytest.raises(ParseError, match="Cache-only"):
        parse_module_list("Error: Cache-only enabled but no cache for 'gpuboot'\n")


def test_dnf_pins_split_name_epoch_version_release():
    assert split_nevr("cuda-toolkit-12-4-12.4.1-1") == ("cuda-toolkit-12-4", "12.4.1-1")
    assert split_nevr("nvidia-driver-3:550.54.15-1.el9") == ("nvidia-driver", "3:550.54.15-1.el9")
    assert split_nevr("nvidia-driver-0:550.54.15-1") == ("nvidia-driver", "550.54.15-1")
    with pytest.raises(ParseError):
        split_nevr("nvidia-driver=550.54.15-1")


# ---------------------------------------------------------------- rules on an EL node
STACK = load_stack("lts-550-cuda12.4")
EL_VARS = {
    **role_vars(STACK, "redhat"),
    "gpuboot_os_family": "redhat",
    "gpuboot_baseline_manage_kernel": False,
}
SHOW_OFF = "".join(
    f"Id={t}\nUnitFileState=\nActiveState=inactive\n\n" for t in DNF_AUTOMATIC_TIMERS
)


def _converged() -> dict[str, str]:
    """An el9 node converged to the stack: every pin installed at its version and locked,
    the driver's stream enabled, dnf-automatic absent (as rpm, dnf and systemd print it)."""
    pins = [split_nevr(p) for v, p in _pins()]
    rpm = ["redhat-release 0 9.4 0.5.el9 noarch"]
    locks = []
    for name, version in pins:
        epoch, _, vr = version.rpartition(":")
        v, r = vr.rsplit("-", 1)
        rpm.append(f"{name} {epoch or 0} {v} {r} x86_64")
        locks.append(f"{name}-{epoch or 0}:{vr}.*")
    return {
        "rpm_-qa.txt": "\n".join(rpm) + "\n",
        "dnf_versionlock_list.txt": "\n".join(locks) + "\n",
        "dnf_module_list_--enabled.txt": (
            "gpuboot\nName          Stream       Profiles    Summary\n"
            "nvidia-driver 550-open [e] default, fm NVIDIA driver 550 open\n\n"
            "Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled\n"
        ),
        "systemctl_show_dnf-automatic.txt": SHOW_OFF,
        "proc_driver_nvidia_version.txt": (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build\n"
        ),
        "reboot-required.txt": "",
    }


def _pins() -> list[tuple[str, str]]:
    lists = [k for k in EL_VARS if k.endswith("_packages") and k != "kernel_hold_packages"]
    return [(k, p) for k in lists if k != "kernel_packages" for p in EL_VARS[k]]


def _judge(files: dict[str, str], rule: str, **hostvars):
    evidence = {name: ProbeOutput(text, "", 0) for name, text in files.items()}
    ctx = NodeContext("el1", {"hardware": {}}, {**EL_VARS, **hostvars})
    (finding,) = rules.evaluate(evidence, ctx, only=[rule])
    return finding


@pytest.mark.parametrize("rule", ["STK-001", "STK-002", "STK-003"])
def test_a_converged_el_node_passes(rule):
    finding = _judge(_converged(), rule)
    assert finding.status == "PASS" and finding.applicable, finding.reason


def test_stk002_names_an_unlocked_a_moved_and_a_missing_package_and_the_stream():
    files = _converged()
    files["dnf_versionlock_list.txt"] = files["dnf_versionlock_list.txt"].replace(
        "datacenter-gpu-manager-1:3.3.9-1.*\n", ""
    )
    files["rpm_-qa.txt"] = (
        files["rpm_-qa.txt"]
        .replace("cuda-toolkit-12-4 0 12.4.1 1", "cuda-toolkit-12-4 0 12.4.2 1")
        .replace("nvidia-fs 0 2.20.5 1 x86_64\n", "")
    )
    files["dnf_module_list_--enabled.txt"] = files["dnf_module_list_--enabled.txt"].replace(
        "550-open [e]", "570-open [e]"
    )
    finding = _judge(files, "STK-002")
    assert finding.status == "FAIL"
    assert "not installed: nvidia-fs-2.20.5-1" in finding.reason
    assert "moved: cuda-toolkit-12-4 12.4.2-1 (pinned 12.4.1-1)" in finding.reason
    assert "not held: datacenter-gpu-manager" in finding.reason
    assert "module stream nvidia-driver:570-open enabled, pinned nvidia-driver:550-open" in (
        finding.reason
    )


def test_stk003_on_el_fails_on_a_dnf_automatic_timer_enabled_or_running():
    files = _converged()
    files["systemctl_show_dnf-automatic.txt"] = SHOW_OFF.replace(
        "Id=dnf-automatic-install.timer\nUnitFileState=\nActiveState=inactive",
        "Id=dnf-automatic-install.timer\nUnitFileState=enabled\nActiveState=active",
    )
    finding = _judge(files, "STK-003")
    assert finding.status == "FAIL"
    assert (
        finding.reason
        == "dnf-automatic may upgrade the node: dnf-automatic-install.timer (enabled, active)"
    )


def test_stk003_on_el_without_the_timers_evidence_is_error_never_pass():
    files = _converged()
    files["systemctl_show_dnf-automatic.txt"] = SHOW_OFF.split("\n\n")[0] + "\n"
    assert _judge(files, "STK-003").status == "ERROR"


def test_stk001_on_el_reads_nvidia_driver_from_rpm():
    files = _converged()
    files["rpm_-qa.txt"] = files["rpm_-qa.txt"].replace(
        "nvidia-driver 3 550.54.15 1.el9", "nvidia-driver 3 550.90.07 1.el9"
    )
    finding = _judge(files, "STK-001")
    assert finding.status == "FAIL"
    assert finding.reason == "nvidia-driver is 3:550.90.07-1.el9, pinned 3:550.54.15-1.el9"


def test_el_nodes_are_asked_rpm_and_dnf_not_dpkg_in_the_same_round_trip():
    debian = package_probes(PROBES, {})
    el = package_probes(PROBES, {"gpuboot_os_family": "redhat"})
    assert debian == PROBES
    files = {p.file for p in el}
    assert {"dpkg-query_-W.txt", "apt-mark_showhold.txt"}.isdisjoint(files)
    assert {p.file for p in EL_PACKAGE_PROBES} <= files
    assert "proc_driver_nvidia_version.txt" in files  # everything else stays


def test_an_el_hosts_fingerprint_reads_its_rpm_listing(tmp_path, read):
    from gpuboot.report.fingerprint import host_fingerprint

    (tmp_path / "rpm_-qa.txt").write_text(read("rpm/rpm_-qa_--qf.rpm4.18-installroot.txt"))
    stack = host_fingerprint(tmp_path)["stack"]
    assert stack["packages"]["nvidia-driver"] == "3:550.54.15-1.el9"
    assert stack["package_count"] == 3


def test_an_el_fingerprint_lists_every_installed_kernel(tmp_path, read):
    """Two kernels side by side (installonly): both versions, as a list, not a repr."""
    from gpuboot.report.fingerprint import host_fingerprint

    listing = read("rpm/rpm_-qa_--qf.rpm4.18-installroot-two-kernels.txt")
    (tmp_path / "rpm_-qa.txt").write_text(listing)
    stack = host_fingerprint(tmp_path)["stack"]
    assert stack["packages"]["kernel-core"] == ["5.14.0-362.8.1.el9_3", "5.14.0-427.13.1.el9_4"]
    json.dumps(stack)  # the report writes it as JSON


def test_systemctl_show_blocks_in_systemds_own_property_order():
    # as systemd 252 printed it on the el9 lab node for a timer that does not exist
    # (properties in systemd's order, not the requested one)
    real = "Id=dnf-automatic.timer\nActiveState=inactive\nUnitFileState=\n"
    two = real + "\nId=dnf-automatic-install.timer\nActiveState=active\nUnitFileState=enabled\n"
    units = parse_systemctl_show(two)
    assert units["dnf-automatic.timer"] == {
        "Id": "dnf-automatic.timer",
        "ActiveState": "inactive",
        "UnitFileState": "",
    }
    assert units["dnf-automatic-install.timer"]["UnitFileState"] == "enabled"
    with pytest.raises(ParseError, match="without Id"):
        parse_systemctl_show("ActiveState=inactive\n")


def test_a_module_listing_cut_short_is_unreadable_not_no_stream(read):
    """Without its table (or dnf's "no match" answer) a listing would read as "no stream
    enabled", and a row cut inside would make a flag the stream: both are unreadable."""
    listing = read("dnf/dnf_module_list_--enabled.fm-installed.dnf4.14-installroot.txt")
    for cut in (listing.splitlines()[0] + "\n", listing.replace("550-open ", "", 1), ""):
        with pytest.raises(ParseError):
            parse_module_list(cut)


def test_stk002_on_a_module_listing_cut_before_its_table_is_error_not_fail():
    files = _converged()
    files["dnf_module_list_--enabled.txt"] = "gpuboot\n"  # the repository's name, then nothing
    finding = _judge(files, "STK-002")
    assert finding.status == "ERROR", finding
