"""NVSwitch SXids from the nvidia-nvswitch driver's kernel lines and from fabric manager's log,
judged by XID-002: fatal FAIL, non-fatal WARN once one link repeats it SXID_WARN_COUNT times
(tests/fixtures/captures/xid/SOURCES.md)."""

from __future__ import annotations

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext
from gpuboot.evidence.kernel_log import parse_kernel_log


def _xid002(text: str):
    ctx = NodeContext("n1", {})
    (found,) = rules.evaluate({"dmesg.txt": ProbeOutput(text, "", 0)}, ctx, only=["XID-002"])
    return found


def test_xid002_follows_xid001_and_is_unique():
    ids = [r.id for r in rules.RULES]
    assert ids.count("XID-002") == 1 and ids.index("XID-002") == ids.index("XID-001") + 1
    # the kernel log in every form (dmesg, journalctl -k, syslog), like XID-001
    assert rules.RULES_BY_ID["XID-002"].evidence == rules.RULES_BY_ID["XID-001"].evidence
    assert rules.RULES_BY_ID["XID-002"].evidence[0] == "dmesg*"


def test_fatal_sxids_after_a_fallen_gpu(read):
    text = read("xid/hgx-xid79-sxid20034-fatal-dmesg.txt")
    log = parse_kernel_log(text)
    assert dict(log.xid_counts) == {79: 1}
    # the Severity/Data continuation lines belong to the event above them: 4 events, not 8
    assert [(s.code, s.switch, s.link, s.fatal) for s in log.sxids] == [
        (20034, "0000:06:00.0", 48, True),
        (20034, "0000:05:00.0", 63, True),
        (20034, "0000:07:00.0", 37, True),
        (20034, "0000:05:00.0", 62, True),
    ]
    first = log.sxids[0]
    assert first.source == "kernel" and first.message == "LTSSM Fault Up"
    assert first.timestamp == "6781753.400584"

    found = _xid002(text)
    assert found.status == "FAIL", found.reason
    assert "SXid 20034" in found.reason and "0000:05:00.0 link 62" in found.reason
    assert "fatal" in found.reason and "nvidia-smi -r" in found.action


def test_one_nonfatal_sxid_passes_and_a_repeating_one_warns(read):
    block = read("xid/nvswitch-sxid28006-nonfatal-fm-guide.txt")
    (ev,) = parse_kernel_log(block).sxids
    assert (ev.code, ev.switch, ev.link, ev.fatal) == (28006, "0000:c1:00.0", 46, False)
    assert ev.message == "MC TS crumbstore MCTO (First)"
    assert _xid002(block).status == "PASS"
    # synthetic: the guide's block three times on the same link (no published repeat found)
    warn = _xid002(block * rules.SXID_WARN_COUNT)
    assert warn.status == "WARN", warn.reason
    assert f"{rules.SXID_WARN_COUNT}x non-fatal SXid 28006" in warn.reason
    assert "0000:c1:00.0 link 46" in warn.reason


def test_fabric_manager_log_lines(read):
    log = parse_kernel_log(read("xid/fabricmanager-log-sxid12028-nonfatal.txt"))
    (ev,) = log.sxids
    assert (ev.code, ev.switch, ev.link, ev.fatal, ev.source) == (
        12028,
        "0000:86:00.0",
        61,
        False,
        "fabricmanager",
    )
    assert ev.timestamp == "Feb 27 2025 15:10:02" and log.xids == ()
    assert _xid002(read("xid/fabricmanager-log-sxid12028-nonfatal.txt")).status == "PASS"

    fatal = _xid002(read("xid/fabricmanager-log-sxid20034-fatal.txt"))
    assert fatal.status == "FAIL" and "0000:86:00.0 link 33" in fatal.reason


def test_no_sxid_passes_and_an_empty_log_is_error(read):
    assert _xid002(read("xid_dmesg/h100-xe9680-xid119-gsp-timeout.txt")).status == "PASS"
    assert _xid002("").status == "ERROR"
