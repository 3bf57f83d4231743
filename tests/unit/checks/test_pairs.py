"""Pair planning and attribution: a failed pair is retried with a known-good partner before
the fault is pinned on one node; with no known-good partner nobody is blamed (ERROR)."""

from __future__ import annotations

from gpuboot.checks.base import NodeContext
from gpuboot.checks.bw_rules import check_tcp_bw
from gpuboot.collect import ProbeOutput
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
    assert [(r.server, r.client) for r in retries] == [("n1", "n2")]


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
