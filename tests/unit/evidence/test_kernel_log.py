from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.xid_catalog import XID_CATALOG, xid_info

from .conftest import capture_files


@pytest.mark.parametrize(
    "path", capture_files("xid_dmesg") + capture_files("dmesg_pcie"), ids=lambda p: p.name
)
def test_every_capture_parses(path):
    r = parse_kernel_log(path.read_text())
    assert r.xids or r.pcie_limits


def test_xid119_gsp_timeout_ctime(read):
    r = parse_kernel_log(read("xid_dmesg/h100-xe9680-xid119-gsp-timeout.txt"))
    assert r.timestamp_style == "ctime"
    assert dict(r.xid_counts) == {119: 5}
    first = r.xids[0]
    assert first.pci == "0000:9b:00" and first.pid == 2024380 and first.process == "nvidia-smi"
    assert first.timestamp == "Sun Feb 23 16:24:18 2025" and "GSP" in first.message
    assert first.info.category == "firmware"
    assert {x.process for x in r.xids} == {"nvidia-smi", "cache_mgr_main", "gpud"}


def test_dbe_rowremap_contained_iso(read):
    r = parse_kernel_log(read("xid_dmesg/xid48-dbe-xid63-rowremap-xid94-contained-iso.txt"))
    assert r.timestamp_style == "iso"
    assert dict(r.xid_counts) == {48: 1, 63: 1, 94: 9}
    assert [x.code for x in r.xids[:3]] == [48, 63, 94]
    assert r.xids[0].pid is None and r.xids[0].process is None  # pid='<unknown>'
    assert r.xids[4].pid == 1248209 and r.xids[4].process == "python3.10"
    assert r.categories == {"hardware"}
    assert {x.pci_device for x in r.xids} == {"0000:19:00"}


def test_xid13_43_only_application(read):
    r = parse_kernel_log(read("xid_dmesg/xid13-sm-exceptions-xid43-app-fault-kern-iso.txt"))
    assert r.timestamp_style == "decode+iso"
    assert dict(r.xid_counts) == {13: 629, 43: 7}
    assert r.categories == {"application"}
    x43 = next(x for x in r.xids if x.code == 43)
    assert x43.pid == 2815167 and x43.process == "pt_main_thread"


def test_b200_fallen_off_bus_counts_as_xid79(read):
    r = parse_kernel_log(read("xid_dmesg/b200-journalctl-k-fallen-off-bus-multiline-no-xid.txt"))
    assert r.timestamp_style == "syslog"
    (ev,) = r.xids
    assert ev.code == 79 and ev.derived and ev.pci == "0000:18:00.0"
    assert ev.info.category == "hardware" and ev.info.severity == "critical"
    assert r.xids_for("0000:18:00.0") == (ev,)


def test_single_line_no_timestamp(read):
    r = parse_kernel_log(read("xid_dmesg/a100-xid63-row-remapper-single-line.txt"))
    (ev,) = r.xids
    assert (ev.code, ev.pci, ev.pid, ev.timestamp) == (63, "0000:10:1c", 1896, None)
    assert ev.message.startswith("Row Remapper")


def test_pcie_limited_by_gen4_switch(read):
    r = parse_kernel_log(
        read("dmesg_pcie/h100-pcie-gen5-limited-by-gen4-switch-half-bw-elided.txt")
    )
    assert r.elided and r.xids == () and len(r.pcie_limits) == 2
    first = r.pcie_limits[0]
    assert (first.device, first.limiting_device) == ("0000:04:00.0", "0000:01:00.0")
    assert (first.available_gbits_s, first.capable_gbits_s) == (252.048, 504.112)
    assert (first.limited_by_gts, first.capable_gts, first.limited_width) == (16.0, 32.0, 16)


def test_explicit_xid79_not_double_counted():
    # Layout of a real Xid 79 report (see NVIDIA open-gpu-kernel-modules issue threads).
    text = (
        "May 18 19:02:39 host kernel: NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014\n"
        "May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.\n"
        "May 18 19:02:39 host kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.\n"
    )
    r = parse_kernel_log(text)
    assert dict(r.xid_counts) == {79: 1} and not r.xids[0].derived


def test_clean_log_has_no_events():
    r = parse_kernel_log(
        "[    0.000000] Linux version 6.8.0 (gcc)\n[    1.0] pci 0000:00:00.0: ok\n"
    )
    assert r.xids == () and r.pcie_limits == () and r.timestamp_style == "monotonic"


def test_catalogue_covers_required_codes():
    required = {13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 121, 140}
    assert required <= set(XID_CATALOG)
    for code in required:
        info = XID_CATALOG[code]
        assert info.category in {"hardware", "application", "driver", "firmware"}
        assert info.severity in {"info", "warning", "critical"} and info.action and info.meaning
    assert {XID_CATALOG[c].category for c in (13, 31, 43, 45)} == {"application"}
    assert {XID_CATALOG[c].category for c in (48, 63, 64, 74, 79, 94, 95)} == {"hardware"}
    assert xid_info(9999).category == "unknown"


@pytest.mark.parametrize("text", ["", "  \n", "lorem ipsum dolor\nsit amet\n"])
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_kernel_log(text)
