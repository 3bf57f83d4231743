"""A listing cut short is ERROR naming the file and "truncated", never FAIL.

A listing cut exactly at a line boundary parses cleanly: its lost tail reads as a module,
package, device or port that is not there. gpuboot's own collection records where each
output ended (the node's .rc trailer "<rc> <bytes>", meta.json's "bytes"), and every rule
reading a file whose end does not match is ERROR. The node is a lab node's certify bundle
(tests/fixtures/evaluate/lab-h100-550-quick); the rpm listing is a real capture
(tests/fixtures/captures/rpm).
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.names import RPM_FILE
from gpuboot.bundle.store import read_host_bundle, write_host_bundle
from gpuboot.checks import rules
from gpuboot.checks.base import tool_failure
from gpuboot.collect import unpack
from gpuboot.node_collect import EL_PACKAGE_PROBES
from gpuboot.profiles import load_profile

FIXTURES = Path(__file__).parents[2] / "fixtures"
NODE = FIXTURES / "evaluate" / "lab-h100-550-quick" / "node1"
RPM_CAPTURE = FIXTURES / "captures" / "rpm" / "rpm_-qa_--queryformat_EPOCHNUM.rocky8.txt"

# listing -> the rules that judge what it lists (each PASSes on the whole file)
LISTINGS = {
    "lsmod.txt": ("MOD-001",),
    "lspci_-n_-d_10de:.txt": ("PCI-002",),
    "lspci_-n_-d_15b3:.txt": ("PCI-002",),
    "ibstat.txt": ("NIC-001", "PCI-002"),
    "dpkg-query_-W.txt": ("STK-001", "STK-002"),
}


def _judge(evidence, meta) -> dict:
    ctx = rules.NodeContext(
        host=meta["host"], profile=load_profile(meta["profile"]), hostvars=meta["pins"], meta=meta
    )
    return {f.rule: f for f in rules.evaluate(evidence, ctx)}


@pytest.fixture
def kept(tmp_path) -> Path:
    """The lab node's bundle as this gpuboot keeps it (with its end markers)."""
    evidence, meta = read_host_bundle(NODE)
    meta.pop("outputs", None)
    host = tmp_path / "bundle" / "node1"
    write_host_bundle(host, evidence, meta)
    return host


def _cut(text: str, mid_line: bool) -> str:
    """The first half of the lines; mid_line: and half of the next line."""
    lines = text.splitlines(keepends=True)
    half = len(lines) // 2
    return "".join(lines[:half]) + (lines[half][: len(lines[half]) // 2] if mid_line else "")


def test_the_whole_listings_pass(kept):
    found = _judge(*read_host_bundle(kept))
    for rule in {r for rs in LISTINGS.values() for r in rs}:
        assert found[rule].status == "PASS", (rule, found[rule].reason)


@pytest.mark.parametrize("mid_line", [False, True], ids=["at-line-boundary", "mid-line"])
@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_a_cut_listing_in_a_bundle_is_error_naming_the_file(kept, name, mid_line):
    path = kept / name
    path.write_text(_cut(path.read_text(), mid_line))
    found = _judge(*read_host_bundle(kept))
    for rule in LISTINGS[name]:
        assert found[rule].status == "ERROR", (rule, found[rule].status, found[rule].reason)
        assert name in found[rule].reason and "truncated" in found[rule].reason


def test_a_bundle_file_without_its_end_marker_is_error(kept):
    meta = kept / "meta.json"
    meta.write_text(meta.read_text().replace('"bytes"', '"bytes_"', 1))
    evidence, _meta = read_host_bundle(kept)
    first = sorted(evidence)[0]
    assert "no end marker" in evidence[first].incomplete and first in evidence[first].incomplete


def test_a_bundle_without_end_markers_is_judged_as_it_is():
    """Hand-collected captures and bundles kept before the markers: no marker convention."""
    evidence, _meta = read_host_bundle(NODE)
    assert not any(out.incomplete for out in evidence.values())


def _answer(files: dict[str, str]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            raw = text.encode()
            info = tarfile.TarInfo("./" + name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return base64.b64encode(gzip.compress(buf.getvalue())).decode()  # as the node's answer


@pytest.mark.parametrize("mid_line", [False, True], ids=["at-line-boundary", "mid-line"])
def test_a_node_answer_shorter_than_its_trailer_says_is_cut(mid_line):
    """The live path: a real rpm -qa listing, the node's trailer counting more than came."""
    whole = RPM_CAPTURE.read_text()
    answer = _answer({RPM_FILE: _cut(whole, mid_line), RPM_FILE + ".rc": f"0 {len(whole)}\n"})
    out = unpack(answer, EL_PACKAGE_PROBES)[RPM_FILE]
    assert out.rc == 0 and RPM_FILE in out.incomplete and "truncated" in out.incomplete


def test_a_node_answer_without_its_end_marker_is_cut():
    answer = _answer({RPM_FILE: RPM_CAPTURE.read_text(), RPM_FILE + ".rc": "0\n"})
    assert "no end marker" in unpack(answer, EL_PACKAGE_PROBES)[RPM_FILE].incomplete


def test_a_whole_node_answer_is_whole_and_keeps_its_marker(tmp_path):
    whole = RPM_CAPTURE.read_text()
    answer = _answer({RPM_FILE: whole, RPM_FILE + ".rc": f"0 {len(whole.encode())}\n"})
    evidence = unpack(answer, EL_PACKAGE_PROBES)
    assert evidence[RPM_FILE].incomplete == ""
    write_host_bundle(tmp_path / "node1", evidence, {"host": "node1", "commands": {}})
    assert read_host_bundle(tmp_path / "node1")[0][RPM_FILE].incomplete == ""


def test_a_cut_node_answer_stays_cut_in_the_bundle(tmp_path):
    whole = RPM_CAPTURE.read_text()
    answer = _answer({RPM_FILE: _cut(whole, False), RPM_FILE + ".rc": f"0 {len(whole)}\n"})
    write_host_bundle(tmp_path / "node1", unpack(answer, EL_PACKAGE_PROBES), {"host": "node1"})
    assert "truncated" in read_host_bundle(tmp_path / "node1")[0][RPM_FILE].incomplete


def test_a_cut_rpm_listing_is_error_for_the_package_rules(kept):
    """An EL node (rpm instead of dpkg): the real capture, cut at a line boundary."""
    evidence, meta = read_host_bundle(kept)
    whole = RPM_CAPTURE.read_text()
    answer = _answer({RPM_FILE: _cut(whole, False), RPM_FILE + ".rc": f"0 {len(whole)}\n"})
    evidence[RPM_FILE] = unpack(answer, EL_PACKAGE_PROBES)[RPM_FILE]
    for rule in ("STK-001", "STK-002"):
        finding = _judge(evidence, meta)[rule]
        assert finding.status == "ERROR" and f"{RPM_FILE}: truncated" in finding.reason


@pytest.mark.parametrize("count", ["9" * 5000, "٣٣", "-1", "1e3", "0x20", "31 extra"])
def test_a_node_s_trailer_that_is_no_byte_count_is_no_end_marker(count):
    """A hostile node's trailer: never a traceback, never a count it did not write."""
    body = RPM_CAPTURE.read_text()
    out = unpack(_answer({RPM_FILE: body, RPM_FILE + ".rc": f"0 {count}\n"}), EL_PACKAGE_PROBES)
    assert "no end marker" in out[RPM_FILE].incomplete


def test_a_bundle_s_reason_is_kept_short_and_names_its_file(kept):
    """Every rule reading the file repeats it: a 1 MB reason would be 30 MB of report."""
    meta = kept / "meta.json"
    doc = json.loads(meta.read_text())
    doc["outputs"]["lsmod.txt"] = {"rc": 0, "stderr": "", "incomplete": "x" * 1_000_000}
    meta.write_text(json.dumps(doc))
    why = read_host_bundle(kept)[0]["lsmod.txt"].incomplete
    assert why.startswith("lsmod.txt: ") and len(why) < 400


def test_a_failed_probe_s_reason_is_kept_short():
    out = ProbeOutput("y" * 1_000_000, "", 2)
    assert len(tool_failure("lsmod.txt", out)) < 300


def test_an_xid_seen_in_a_cut_kernel_log_is_fail_naming_it_and_the_cut(kept):
    """FAIL seen > ERROR unreadable: an Xid 79 in the part of dmesg that arrived is a fault
    whatever the lost tail held; the same cut without an Xid stays ERROR, never PASS."""
    path = kept / "dmesg.txt"
    lines = path.read_text().splitlines(keepends=True)
    xid = "[  101.000000] NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus.\n"
    whole = "".join(lines[:3]) + xid + "".join(lines[3:])
    evidence, meta = read_host_bundle(kept)
    write_host_bundle(kept, {**evidence, "dmesg.txt": ProbeOutput(whole, "", 0)}, meta)
    path.write_text(_cut(path.read_text(), mid_line=False))
    assert xid in path.read_text()
    found = _judge(*read_host_bundle(kept))["XID-001"]
    assert found.status == "FAIL" and "79" in found.reason, found
    assert "not whole" in found.reason and "dmesg.txt" in found.reason, found.reason
    path.write_text(_cut(path.read_text().replace(xid, ""), mid_line=False))
    found = _judge(*read_host_bundle(kept))["XID-001"]
    assert found.status == "ERROR", found
