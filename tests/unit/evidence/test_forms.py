"""Forms of the same evidence (evidence/forms.py): one rule reads whichever is held, two
that disagree are ERROR naming both files, the same log kept twice counts once, and
evaluate finds the rules from a bundle of real outputs named after their commands."""

from __future__ import annotations

import json

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.certify import evaluate_bundle
from gpuboot.checks import rules
from gpuboot.checks.base import NodeContext
from gpuboot.evidence.forms import files_of
from gpuboot.evidence.perftest import parse_ib_write_bw
from gpuboot.profiles import load_profile

OFED = {"doca_ofed_enabled": True}


def _judge(evidence: dict[str, str], rule: str, profile="a100-sxm4-8gpu", **pins):
    ctx = NodeContext("n", load_profile(profile), {**OFED, **pins})
    ev = {n: ProbeOutput(t, "", 0) for n, t in evidence.items()}
    (found,) = rules.evaluate(ev, ctx, only=[rule])
    return found


def test_files_are_sorted_into_kinds_and_forms():
    names = [
        "dmesg.txt", "journalctl_-k.txt", "cat_var_log_syslog.txt", "nvidia-smi_-q_-x.xml",
        "nvidia-smi_-q.txt", "nvidia-smi_-q_-d_ECC.txt", "ibstatus.txt", "ibstat.txt",
        "nvidia-smi_nvlink_-s.txt", "dcgmi_nvlink_-s.txt", "nvidia-smi_topo_-m.txt",
    ]  # fmt: skip
    assert [f for _n, f in files_of("kernel_log", names)] == ["dmesg", "journalctl -k", "syslog"]
    assert files_of("smi_q", names)[-1] == ("nvidia-smi_-q_-x.xml", "xml")  # text preferred
    assert files_of("nics", names) == [("ibstat.txt", "ibstat"), ("ibstatus.txt", "ibstatus")]
    assert files_of("nvlink_s", names)[0] == ("nvidia-smi_nvlink_-s.txt", "nvidia-smi")


def test_two_nic_listings_disagreeing_on_a_port_is_error_naming_both(read):
    ibstatus = read("ibstatus/a100-azure-8x-hdr-all-active.txt")
    # the same port (mlx5_ib0 port 1) said ACTIVE by one and DOWN by the other
    down = ibstatus.replace("4: ACTIVE", "1: DOWN", 1)
    found = _judge({"ibstatus.txt": down, "ibstatus_-v.txt": ibstatus}, "NIC-001")
    assert found.status == "ERROR" and "evidence disagrees" in found.reason
    assert "ibstatus.txt" in found.reason and "ibstatus_-v.txt" in found.reason
    assert (
        _judge({"ibstatus.txt": ibstatus, "ibstatus_-v.txt": ibstatus}, "NIC-001").status == "PASS"
    )


def test_the_same_sxid_in_dmesg_and_journalctl_counts_once(read):
    line = read("xid/nvswitch-sxid28006-nonfatal-fm-guide.txt")
    twice = line + line  # two repeats: below the warn count of 3 on one link
    ev = {"dmesg.txt": twice, "journalctl_-k.txt": twice}
    assert _judge(ev, "XID-002", "hgx-h100-sxm-8gpu").status == "PASS"
    ev["dmesg.txt"] = twice + line  # three in the fuller form: the repeat is real
    assert _judge(ev, "XID-002", "hgx-h100-sxm-8gpu").status == "WARN"


def test_a_noheader_query_takes_its_fields_from_the_command_line():
    name = "nvidia-smi_--query-gpu=index,name,persistence_mode_--format=csv,noheader.txt"
    rows = "".join(f"{i}, NVIDIA A100-SXM4-80GB, Enabled\n" for i in range(8))
    found = _judge({name: rows}, "GPU-002")
    assert found.status == "PASS", found
    off = rows.replace("7, NVIDIA A100-SXM4-80GB, Enabled", "7, NVIDIA A100-SXM4-80GB, Disabled")
    assert _judge({name: off}, "GPU-002").reason == "persistence mode off on GPU 7"


def test_ib_write_bw_mb_per_sec_is_10_to_the_6_bytes(read):
    run = parse_ib_write_bw(
        read("ib_write_bw/hdr-ib0-loopback-8MB-server-client-interleaved-24GBps.txt")
    ).runs[0]
    assert run.rows[0].bw_average_gbits_s == pytest.approx(24056.72 * 8 / 1000)


@pytest.mark.parametrize("certified", [False, True])
def test_evaluate_finds_the_rules_a_bundle_of_real_outputs_holds(tmp_path, read, certified):
    host = tmp_path / "n1"
    host.mkdir()
    (host / "journalctl_-k.txt").write_text(read("xid/hgx-xid79-sxid20034-fatal-dmesg.txt"))
    meta = {"host": "n1", "profile": "hgx-h100-sxm-8gpu", "pins": {}}
    if certified:  # a certify run's bundle: every rule, a missing file is the harness's
        meta["outputs"] = {"journalctl_-k.txt": {"rc": 0, "stderr": ""}}
    (host / "meta.json").write_text(json.dumps(meta))
    (node,) = evaluate_bundle(str(tmp_path), ignore_manifest=True).to_dict()["nodes"]
    got = {f["rule"]: f for f in node["findings"]}
    assert got["XID-001"]["status"] == got["XID-002"]["status"] == "FAIL"
    # hand-collected: not given, so not judged; collected: it went missing
    assert ("not in the bundle" in got["GPU-001"]["reason"]) is not certified
    assert got["GPU-001"]["status"] == ("ERROR" if certified else "SKIPPED")
