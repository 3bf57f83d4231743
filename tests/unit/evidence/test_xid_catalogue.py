"""NVIDIA's whole Xid catalogue, `caused by previous Xid N` chains, NVLink5 (144-150) fatal vs
non-fatal and Xid 154 recovery actions, judged by XID-001 on real published lines
(tests/fixtures/captures/xid/SOURCES.md)."""

from __future__ import annotations

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext
from gpuboot.evidence import xid_catalog
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.xid_catalog import XID_CATALOG, xid_info

# NVIDIA's resolution buckets (sheet "Guidance Classes" of Xid-Catalog.xlsx)
BUCKETS = {
    "CONTACT_SUPPORT", "RESTART_APP", "IGNORE", "RESET_GPU", "RESTART_BM", "RESTART_VM",
    "WORKFLOW_XID_45", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR", "WORKFLOW_NVLINK5_ERR",
    "CHECK_MECHANICALS", "UPDATE_SWFW", "XID_154", "CHECK_UVM",
}  # fmt: skip


def _xid001(text: str):
    ctx = NodeContext("n1", {})
    (found,) = rules.evaluate({"dmesg.txt": ProbeOutput(text, "", 0)}, ctx, only=["XID-001"])
    return found


def test_every_catalogue_code_has_meaning_category_bucket_and_advice():
    assert set(XID_CATALOG) == set(range(1, 173))  # the catalogue lists Xid 1..172
    for code, info in XID_CATALOG.items():
        assert info.code == code and info.meaning and info.advice and info.mnemonic, code
        assert info.category in {"hardware", "application", "driver", "firmware"}, code
        assert info.severity in {"info", "warning", "critical"}, code
        assert info.action in BUCKETS, (code, info.action)
        assert info.subsystem, code


@pytest.mark.parametrize(
    ("code", "mnemonic", "bucket", "subsystem"),
    [
        (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", "engine"),
        (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "memory"),
        (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS", "power"),
        (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "memory"),
        (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "nvlink"),
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "pcie"),
        (136, "ALI_TRAINING_FAIL", "RESET_GPU", "nvlink"),
        (144, "NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
        (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
        (150, "NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "nvlink"),
        (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", "security"),
        (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154", "recovery"),
        (171, "UNCORRECTABLE_DRAM_ERROR", "WORKFLOW_XID_48", "memory"),
        (172, "UNCORRECTABLE_SRAM_ERROR", "WORKFLOW_XID_48", "memory"),
    ],
)
def test_rows_as_nvidia_lists_them(code, mnemonic, bucket, subsystem):
    info = xid_info(code)
    assert (info.mnemonic, info.action, info.subsystem) == (mnemonic, bucket, subsystem)


def test_unknown_code_fails_safe_naming_the_catalogue_version():
    info = xid_info(999)
    assert info.category == "unknown" and info.severity == "critical"
    assert xid_catalog.CATALOG_VERSION in info.advice
    # synthetic line: no published capture carries an Xid outside the catalogue
    found = _xid001("[ 12.5] NVRM: Xid (PCI:0000:3b:00): 999, pid=1, name=x, something new\n")
    assert found.status == "FAIL"
    assert "Xid 999" in found.reason and xid_catalog.CATALOG_VERSION in found.action


def test_xid45_caused_by_previous_xid_is_judged_by_the_cause(read):
    text = read("xid/gb200-xid45-caused-by-previous-xid149-145-journal.txt")
    log = parse_kernel_log(text)
    assert dict(log.xid_counts) == {45: 7}
    assert {x.caused_by for x in log.xids} == {149, 145}
    first = log.xids[0]
    assert (first.pci, first.pid, first.process, first.root) == (
        "0000:dc:00",
        1818990,
        "python3",
        149,
    )
    assert first.message == "Ch 00000001"  # the chain is a fact of its own, not message text
    assert log.categories == {"hardware"} and first.info.subsystem == "nvlink"

    found = _xid001(text)
    assert found.status == "FAIL", found.reason
    assert "Xid 145" in found.reason and "Xid 149" in found.reason
    assert "caused by previous" in found.reason and "0000:dc:00" in found.reason
    assert "WORKFLOW_NVLINK5_ERR" in found.action


def test_nvlink5_fatal_and_xid154_recovery_action(read):
    log = parse_kernel_log(read("xid/gb200-xid149-netir-link-fatal-xid154-recovery.txt"))
    assert dict(log.xid_counts) == {149: 5, 154: 4}
    x149 = [x for x in log.xids if x.code == 149]
    assert {x.fatal for x in x149} == {True} and {x.severity for x in x149} == {"critical"}
    x154 = [x for x in log.xids if x.code == 154]
    assert [x.recovery for x in x154] == ["Drain and Reset"] + ["GPU Reset Required"] * 3
    assert [x.action for x in x154] == ["DRAIN_AND_RESET"] + ["RESET_GPU"] * 3
    assert {x.severity for x in x154} == {"critical"}

    found = _xid001(read("xid/gb200-xid149-netir-link-fatal-xid154-recovery.txt"))
    assert found.status == "FAIL"
    assert "Xid 149" in found.reason and "Xid 154" in found.reason


def test_nvlink5_nonfatal_alone_warns_and_fatal_fails(read):
    nonfatal, fatal = read("xid/xid145-nonfatal-xid149-fatal-gpud-pr1174.txt").splitlines()
    (ev,) = parse_kernel_log(nonfatal).xids
    assert (ev.code, ev.fatal, ev.severity, ev.action) == (145, False, "info", "IGNORE")
    alone = _xid001(nonfatal + "\n")
    assert alone.status == "WARN" and "Xid 145" in alone.reason, alone.reason
    both = _xid001(nonfatal + "\n" + fatal + "\n")
    assert both.status == "FAIL" and "Xid 149" in both.action, both.action


def test_xid154_back_to_none_is_not_a_finding():
    # synthetic: NVIDIA's own example wording with the target action "None"
    text = (
        "[171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from "
        "0x1 (GPU Reset Required) to 0x0 (None)\n"
    )
    (ev,) = parse_kernel_log(text).xids
    assert (ev.recovery, ev.action) == ("None", "IGNORE")
    assert _xid001(text).status == "WARN"


def test_application_only_and_ignore_bucket_codes(read):
    assert _xid001(read("xid_dmesg/xid13-sm-exceptions-xid43-app-fault-kern-iso.txt")).status == (
        "PASS"
    )
    # Xid 92 (corrected single-bit errors, NVIDIA bucket IGNORE) is worth a look, not a FAIL
    found = _xid001("NVRM: Xid (PCI:0000:3b:00): 92, High single-bit ECC error rate\n")
    assert found.status == "WARN" and "IGNORE" in found.action
