"""`evaluate --ignore-manifest` of a bundle of hand-collected outputs judges every rule its
files feed and marks the rest "not judged" (SKIPPED naming the files it lacks), never PASS
nor ERROR; the node is never PASS on what the bundle did not hold. A bundle gpuboot
collected that lacks a file stays ERROR: there the file went missing."""

from __future__ import annotations

import json
import shutil

import pytest

from gpuboot.cli import main
from tests.paths import REPO

CAPTURES = REPO / "tests" / "fixtures" / "captures"
HEALTHY_Q = CAPTURES / "nvidia_smi_q" / "h100-hbm3-8gpu-q-535.183.01.txt"
XID79 = CAPTURES / "xid_dmesg" / "h100-xid79-fallen-off-bus-5d-crash-dump.txt"
PROFILE = "hgx-h100-sxm-8gpu"


def _host(root, name, files, **meta):
    d = root / name
    d.mkdir()
    for as_name, capture in files.items():
        shutil.copyfile(capture, d / as_name)
    (d / "meta.json").write_text(json.dumps({"host": name, "profile": PROFILE, **meta}))


def _evaluate(capsys, root) -> tuple[int, dict[str, dict]]:
    code = main(["evaluate", "--bundle", str(root), "--ignore-manifest", "--json", "-q"])
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    return code, {n["host"]: n for n in nodes}


def _by_rule(node) -> dict[str, dict]:
    return {f["rule"]: f for f in node["findings"]}


@pytest.fixture
def hand_bundle(tmp_path):
    _host(tmp_path, "faulty", {"nvidia-smi_-q.txt": HEALTHY_Q, "dmesg.txt": XID79})
    _host(tmp_path, "healthy", {"nvidia-smi_-q.txt": HEALTHY_Q})
    _host(tmp_path, "unknown", {"notes.txt": HEALTHY_Q})
    return tmp_path


def test_rules_without_their_files_are_skipped_naming_them(hand_bundle, capsys):
    _code, nodes = _evaluate(capsys, hand_bundle)
    got = _by_rule(nodes["faulty"])
    assert got["XID-001"]["status"] == "FAIL"  # judged: dmesg.txt feeds it
    assert got["ECC-001"]["status"] == "PASS"  # judged: nvidia-smi_-q.txt feeds it
    for rule, names in (("MOD-001", "lsmod.txt"), ("BW-005", "ib_write_bw*")):
        assert got[rule]["status"] == "SKIPPED", got[rule]
        assert got[rule]["reason"] == f"not judged: {names} not in the bundle"
    unjudged = [f for f in got.values() if f["reason"].startswith("not judged")]
    assert unjudged and all(f["status"] == "SKIPPED" for f in unjudged)
    assert "ERROR" not in {f["status"] for f in got.values()}
    assert nodes["faulty"]["verdict"] == "FAIL"  # a fault seen stands


def test_a_partial_bundle_that_passes_what_it_holds_is_not_pass(hand_bundle, capsys):
    code, nodes = _evaluate(capsys, hand_bundle)
    node = nodes["healthy"]
    assert {f["status"] for f in node["findings"]} <= {"PASS", "WARN", "SKIPPED"}
    assert node["verdict"] == "ERROR" and code == 1


def test_a_host_whose_files_feed_no_rule_has_nothing_to_judge(hand_bundle, capsys):
    _code, nodes = _evaluate(capsys, hand_bundle)
    node = nodes["unknown"]
    assert node["verdict"] == "ERROR"
    assert {f["status"] for f in node["findings"]} == {"SKIPPED"}
    assert all("nothing to judge: no rule reads notes.txt" in f["reason"] for f in node["findings"])


def test_a_collected_bundle_missing_a_file_stays_error(tmp_path, capsys):
    outputs = {"nvidia-smi_-q.txt": {"rc": 0, "stderr": ""}}
    _host(tmp_path, "n1", {"nvidia-smi_-q.txt": HEALTHY_Q}, outputs=outputs)
    _code, nodes = _evaluate(capsys, tmp_path)
    got = _by_rule(nodes["n1"])
    assert got["MOD-001"]["status"] == got["NVL-001"]["status"] == "ERROR"
    assert not any(f["reason"].endswith("not in the bundle") for f in got.values())
