"""Pair planning and attribution: a failed pair is retried with a known-good partner before
the fault is pinned on one node; with no known-good partner nobody is blamed (ERROR)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks.base import NodeContext
from gpuboot.checks.bw_rules import check_ib_write_bw, check_tcp_bw
from gpuboot.checks.pair_phase import run_pair_probes
from gpuboot.probes import pairs, tcpbw
from gpuboot.profiles import load_profile


def test_ring_rounds_are_node_disjoint():
    rounds = pairs.ring_rounds(["a", "b", "c", "d", "e"])
    assert sum(len(r) for r in rounds) == 5
    for r in rounds:
        nodes = [h for p in r for h in p]
        assert len(nodes) == len(set(nodes))
    assert pairs.ring_rounds(["a", "b"]) == [[("a", "b")]]
    assert pairs.ring_rounds(["a"]) == []


def _fake_runner(broken: set[str]):
    """A TCP pair that moves 9 Gb/s unless one side is broken (then the client fails)."""

    def run(host: str, cmd: str) -> ProbeOutput:
        if host in broken:
            return ProbeOutput("", "Connection refused", 1)
        role = "server" if " server " in cmd else "client"
        line = f"gpuboot-tcpbw role={role} bytes=1125000000 seconds=1.000 gbits_s=9.000\n"
        return ProbeOutput(line, "", 0)

    return run


def _attribute(hosts, broken):
    spec = pairs.tcp_spec(0.1)
    run = _fake_runner(broken)
    addr = {h: h for h in hosts}

    def one(s, c, suffix=""):
        return pairs.run_pair(spec, s, c, addr, run, 0.1, suffix)

    runs = [one(s, c) for rnd in pairs.ring_rounds(hosts) for s, c in rnd]
    return pairs.attribute(hosts, runs, lambda s, c: one(s, c, ".retry"))


def test_bad_node_is_pinned_after_a_retry_with_a_known_good_partner():
    verdict, retries = _attribute(["n1", "n2", "n3"], {"n2"})
    assert verdict["n2"]["status"] == "pinned"
    assert "known-good" in verdict["n2"]["reason"]
    assert verdict["n1"]["status"] == verdict["n3"]["status"] == "good"
    # both members of the failed pair n1-n2 re-tested with the known-good n3 (n3-n2 also
    # failed: n2 stays pinned without a re-test with n1, its failed partner)
    assert sorted((r.server, r.client) for r in retries) == [("n3", "n1"), ("n3", "n2")]
    assert "cleared: pair with n2 below its band" in verdict["n1"]["reason"]


def test_two_nodes_and_a_failed_pair_blame_nobody():
    verdict, _ = _attribute(["n1", "n2"], {"n2"})
    assert {v["status"] for v in verdict.values()} == {"unattributed"}


def test_pair_rule_reads_the_attribution():
    profile = load_profile("l40s-pcie-4gpu")
    verdict, _ = _attribute(["n1", "n2", "n3"], {"n2"})
    ev = {"tcp_bw_n1.txt": ProbeOutput("", "Connection refused", 1)}
    for host, status in (("n2", "FAIL"), ("n1", "PASS")):
        meta = {"probes": "quick", "pairs": {"tcp_bw": {host: verdict[host]}}}
        finding = check_tcp_bw(ev, NodeContext(host, profile, {}, meta))
        assert finding.status == status, finding
    line = "gpuboot-tcpbw role=server bytes=1 seconds=1 gbits_s=2.5"
    assert tcpbw.parse_tcpbw(line).gbits_s == 2.5


# A real ib_write_bw client output (recorded, see captures/SOURCES.md): 181.46 Gb/s average.
IB_CLIENT = (
    Path(__file__).parents[2]
    / "fixtures/captures/ib_write_bw/a40-roce-gpudirect-cuda-dmabuf-16qp-client-181gbps.txt"
).read_text()


def _ib_runner(slow: dict[tuple[str, str], float]):
    """ib_write_bw pairs at the capture's 181.46 Gb/s, scaled for the (host, hca) in slow."""

    tcp = _fake_runner(set())

    def run(host: str, cmd: str) -> ProbeOutput:
        if "ib_write_bw" not in cmd:
            return tcp(host, cmd)
        hca, peer = cmd.split(" -d ")[1].split()[0], cmd.split()[-1]
        if peer.startswith("-"):  # the server: its side prints nothing the rule reads
            return ProbeOutput(" WARNING: BW peak won't be measured in this run.\n", "", 0)
        factor = min(slow.get((host, hca), 1.0), slow.get((peer, hca), 1.0))
        return ProbeOutput(IB_CLIENT.replace("181.46", f"{181.46 * factor:.2f}"), "", 0)

    return run


# Absolute band around the capture's figure: a third of it fails, 0.9 of it warns.
BAND = {"ib_write_bw": {"expected": 181.46, "warn_below": 170.0, "fail_below": 100.0}}


@pytest.fixture(autouse=True)
def _no_head_start(monkeypatch):
    """The fake runner answers at once: no server needs time to start listening."""
    monkeypatch.setattr(pairs, "SERVER_HEAD_START_S", 0.0)


def _entries(level: str, hosts=("n1", "n2", "n3")):
    profile = load_profile("hgx-h100-sxm-8gpu")
    return {
        h: {
            "profile": profile,
            "hostvars": {"doca_ofed_enabled": True, "gpuboot_thresholds": BAND},
            "meta": {"probes": level},
            "evidence": {},
        }
        for h in hosts
    }


def test_full_level_measures_every_rail_and_pins_the_slow_one():
    entries = _entries("full")
    # n2's rail mlx5_5 moves a third: below the band on that rail alone.
    run_pair_probes(entries, _ib_runner({("n2", "mlx5_5"): 0.33}))
    files = [f for f in entries["n1"]["evidence"] if f.startswith("ib_write_bw_")]
    assert {f.split("_-d_")[1].rsplit("_", 1)[0] for f in files} == {f"mlx5_{i}" for i in range(8)}
    v2 = entries["n2"]["meta"]["pairs"]["ib_write_bw"]["n2"]
    assert v2["status"] == "pinned" and v2["reason"].startswith("mlx5_5: ")
    assert {r["rail"] for r in v2["runs"]} == {f"mlx5_{i}" for i in range(8)}
    ctx = NodeContext(
        "n2", entries["n2"]["profile"], entries["n2"]["hostvars"], entries["n2"]["meta"]
    )
    finding = check_ib_write_bw(entries["n2"]["evidence"], ctx)
    assert finding.status == "FAIL" and "mlx5_5" in finding.reason
    v1 = entries["n1"]["meta"]["pairs"]["ib_write_bw"]["n1"]
    assert v1["status"] == "good"


def test_quick_level_measures_the_first_rail_only():
    entries = _entries("quick", hosts=("n1", "n2"))
    run_pair_probes(entries, _ib_runner({("n2", "mlx5_5"): 0.33}))
    files = [f for f in entries["n1"]["evidence"] if f.startswith("ib_write_bw_")]
    assert files == ["ib_write_bw_-d_mlx5_0_n2.txt"]
    assert entries["n2"]["meta"]["pairs"]["ib_write_bw"]["n2"]["status"] == "good"


def test_slowest_rail_within_the_fail_band_is_judged_by_name():
    entries = _entries("full", hosts=("n1", "n2"))
    run_pair_probes(entries, _ib_runner({("n2", "mlx5_3"): 0.9}))  # 163 Gb/s: WARN
    e = entries["n2"]
    finding = check_ib_write_bw(
        e["evidence"], NodeContext("n2", e["profile"], e["hostvars"], e["meta"])
    )
    assert finding.status == "WARN" and "slowest of 8 rails: mlx5_3" in finding.reason, finding
    # Offline (no attribution in meta): the same rail is found from the file names.
    offline = NodeContext("n2", e["profile"], e["hostvars"], {"probes": "full"})
    finding = check_ib_write_bw(e["evidence"], offline)
    assert finding.status == "WARN" and "slowest of 8 rails: mlx5_3" in finding.reason, finding
