"""STK-002 on real dpkg/apt captures from a lab node converged to the 550 LTS stack,
then drifted (one package unheld, the container toolkit removed)."""

from __future__ import annotations

from pathlib import Path

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext
from gpuboot.stacks import load_stack, role_vars

DPKG = Path(__file__).resolve().parents[2] / "fixtures" / "captures" / "dpkg"
STACK_VARS = {**role_vars(load_stack("lts-550-cuda12.4")), "gpuboot_baseline_manage_kernel": False}


def _evidence(state: str, showhold_rc: int = 0) -> dict[str, ProbeOutput]:
    return {
        "dpkg-query_-W.txt": ProbeOutput((DPKG / f"dpkg-query_-W.{state}.txt").read_text(), "", 0),
        "apt-mark_showhold.txt": ProbeOutput(
            (DPKG / f"apt-mark_showhold.{state}.txt").read_text(),
            "E: Could not open lock file" if showhold_rc else "",
            showhold_rc,
        ),
    }


def _stk002(evidence, **hostvars):
    ctx = NodeContext("node1", {"hardware": {}}, {**STACK_VARS, **hostvars})
    (finding,) = rules.evaluate(evidence, ctx, only=["STK-002"])
    return finding


def test_converged_node_passes():
    finding = _stk002(_evidence("converged"))
    assert finding.status == "PASS" and finding.applicable


def test_drift_names_every_package_and_how():
    finding = _stk002(_evidence("drifted"))
    assert finding.status == "FAIL"
    assert "not installed: nvidia-container-toolkit=1.17.8-1, nvidia-container-toolkit-base=" in (
        finding.reason
    )
    assert "not held: datacenter-gpu-manager" in finding.reason
    assert "gpuboot install --tags STK-002" in finding.action


def test_version_moved_past_the_pin():
    finding = _stk002(_evidence("converged"), dcgm_packages=["datacenter-gpu-manager=1:3.3.8"])
    assert finding.status == "FAIL"
    assert finding.reason == "moved: datacenter-gpu-manager 1:3.3.9 (pinned 1:3.3.8)"


def test_managed_kernel_is_part_of_the_pins():
    finding = _stk002(_evidence("converged"), gpuboot_baseline_manage_kernel=True)
    assert finding.status == "FAIL" and "linux-image-5.15.0-119-generic=5.15.0-119.129" in (
        finding.reason
    )


def test_disabled_component_is_not_asked_for():
    finding = _stk002(_evidence("drifted"), nvidia_container_toolkit_enabled=False)
    assert finding.reason == "not held: datacenter-gpu-manager"


def test_host_without_stack_lists_is_not_applicable():
    ctx = NodeContext("n", {"hardware": {}}, {"nvidia_driver_branch": "550"})
    (finding,) = rules.evaluate(_evidence("drifted"), ctx, only=["STK-002"])
    assert finding.status == "SKIPPED" and not finding.applicable


def test_failed_showhold_is_error_not_fail():
    finding = _stk002(_evidence("converged", showhold_rc=100))
    assert finding.status == "ERROR" and "lock file" in finding.reason


def _stk003(state: str, **hostvars):
    text = (DPKG / f"apt-config_dump_Unattended-Upgrade.{state}.txt").read_text()
    evidence = {"apt-config_dump_Unattended-Upgrade.txt": ProbeOutput(text, "", 0)}
    ctx = NodeContext("node1", {"hardware": {}}, {**STACK_VARS, **hostvars})
    (finding,) = rules.evaluate(evidence, ctx, only=["STK-003"])
    return finding


def test_baseline_blacklist_covers_every_pinned_package():
    assert _stk003("converged").status == "PASS"


def test_missing_blacklist_names_the_packages_it_leaves_open():
    finding = _stk003("drifted")
    assert finding.status == "FAIL" and "--tags STK-003" in finding.action
    assert finding.reason.startswith("unattended-upgrades may upgrade: doca-ofed, nvidia-driver-")
    assert "datacenter-gpu-manager" in finding.reason


def test_a_pin_no_pattern_matches_is_named():
    finding = _stk003("converged", dcgm_packages=["dcgm-exporter=4.1.1-1"])
    assert finding.reason == "unattended-upgrades may upgrade: dcgm-exporter"


def test_off_debian_apt_config_is_not_the_evidence():
    # EL nodes: STK-003 judges the dnf-automatic timers (tests/unit/evidence/test_rpm.py);
    # an apt-config dump alone proves nothing there
    finding = _stk003(
        "drifted", **role_vars(load_stack("lts-550-cuda12.4"), "redhat"), gpuboot_os_family="redhat"
    )
    assert finding.status == "ERROR"


# STK-001 and a driver installed outside packages: the converged node's real listing without
# any driver package, and the lab node's loaded module (550.54.15)
NV_VERSION = (
    DPKG.parents[1] / "evaluate" / "lab-h100-550-quick" / "node1" / "proc_driver_nvidia_version.txt"
)
DRIVER_PACKAGES = ("nvidia-driver", "nvidia-dkms", "nvidia-kernel", "nvidia-utils", "nvidia-kmod")


def _runfile_evidence(module_loaded: bool = True, keep: tuple[str, ...] = ()) -> dict:
    lines = (DPKG / "dpkg-query_-W.converged.txt").read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.startswith(DRIVER_PACKAGES) or ln.startswith(keep)]
    version = NV_VERSION.read_text() if module_loaded else ""
    return {
        "dpkg-query_-W.txt": ProbeOutput("".join(kept), "", 0),
        "proc_driver_nvidia_version.txt": ProbeOutput(version, "", 0 if module_loaded else 1),
        "reboot-required.txt": ProbeOutput("", "", 0),
    }


def _stk001(evidence):
    ctx = NodeContext("node1", {"hardware": {}}, STACK_VARS)
    (finding,) = rules.evaluate(evidence, ctx, only=["STK-001"])
    return finding


def test_a_loaded_driver_no_package_carries_is_named_with_nvidias_way_out():
    finding = _stk001(_runfile_evidence())
    assert finding.status == "FAIL"
    assert finding.reason.startswith(
        "the NVIDIA driver 550.54.15 is loaded but no driver package is installed: a driver "
        "installed outside packages (NVIDIA's .run installer)"
    )
    assert finding.action == (
        "on node1: `nvidia-installer --uninstall` (NVIDIA's removal of a .run install), "
        "reboot, then `gpuboot install -i <inventory> --limit node1`"
    )


def test_a_missing_driver_package_beside_another_driver_package_is_not_a_runfile():
    # a packaged driver of another branch is a package problem, said as before
    finding = _stk001(_runfile_evidence(keep=("nvidia-dkms",)))
    assert finding.status == "FAIL" and finding.reason == (
        "nvidia-utils-550 is not installed (pinned 550.54.15-1)"
    )
    # no module loaded: nothing runs outside packages, the package is missing
    finding = _stk001(_runfile_evidence(module_loaded=False))
    assert finding.reason == "nvidia-utils-550 is not installed (pinned 550.54.15-1)"
