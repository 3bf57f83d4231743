"""The pair probes' second pass: a pair below its band has BOTH members
re-tested, each with its own known-good partner; only the node that stays slow fails, the
partner is cleared and its PASS says why."""

from __future__ import annotations

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks.base import NodeContext
from gpuboot.checks.bw_rules import check_tcp_bw
from gpuboot.probes import pairs
from gpuboot.profiles import load_profile


def _attribute(hosts: list[str], slow: set[str]):
    """TCP pairs at 9 Gb/s, 0.05 Gb/s where a slow node takes part (fail band 0.1)."""
    spec = pairs.tcp_spec(0.1)
    calls: list[tuple[str, str]] = []

    def run(host: str, cmd: str) -> ProbeOutput:
        return ProbeOutput("", "", 0)

    def one(s: str, c: str, suffix: str = "") -> pairs.PairRun:
        calls.append((s, c))
        value = 0.05 if {s, c} & slow else 9.0
        ok = value >= 0.1
        return pairs.PairRun(spec.kind, s, c, ok, value, "ok" if ok else f"{value:g} below 0.1")

    runs = [one(s, c) for rnd in pairs.ring_rounds(hosts) for s, c in rnd]
    verdict, retries = pairs.attribute(hosts, runs, lambda s, c: one(s, c, ".retry"))
    return verdict, retries, run


def test_both_members_are_retested_each_with_its_own_known_good_partner():
    # ring n1-n2-n3-n4-n1 in rounds (n1,n2)+(n3,n4), (n2,n3)+(n4,n1); n3 slow: n3-n4 fails
    # first, then n2-n3. n1's every run is ok: known-good.
    verdict, retries, _ = _attribute(["n1", "n2", "n3", "n4"], {"n3"})
    partners = {
        h: {
            g for r in retries for g in (r.server, r.client) if g != h and h in (r.server, r.client)
        }
        for h in ("n1", "n2", "n3", "n4")
    }
    # n3-n4 failed: n3 re-tested with n1 (it failed with n2 and n4), n4 with another: n2
    assert partners["n3"] == {"n1"}
    assert "n2" in partners["n4"]
    # no re-test repeats a pair that already failed
    tested = {frozenset((r.server, r.client)) for r in retries}
    assert not tested & {frozenset(("n2", "n3")), frozenset(("n3", "n4"))}
    assert verdict["n3"]["status"] == "pinned"
    assert "retry with known-good n1" in verdict["n3"]["reason"]
    assert {h: verdict[h]["status"] for h in ("n1", "n2", "n4")} == dict.fromkeys(
        ("n1", "n2", "n4"), "good"
    )
    assert verdict["n4"]["reason"].startswith("cleared: pair with n3 below its band")
    assert "retry with known-good n2 ok" in verdict["n4"]["reason"]
    assert verdict["n2"]["reason"].startswith("cleared: pair with n3 below its band")
    assert verdict["n1"]["reason"] == "ok"


def test_the_cleared_partner_passes_saying_why():
    verdict, _, _ = _attribute(["n1", "n2", "n3"], {"n2"})
    profile = load_profile("l40s-pcie-4gpu")
    ev = {"tcp_bw_n2.txt": ProbeOutput("", "", 0)}
    meta = {"probes": "quick", "pairs": {"tcp_bw": {"n1": verdict["n1"]}}}
    finding = check_tcp_bw(ev, NodeContext("n1", profile, {}, meta))
    assert finding.status == "PASS", finding
    assert "cleared: pair with n2 below its band" in finding.reason, finding
    assert "retry with known-good n3 ok" in finding.reason, finding
    meta = {"probes": "quick", "pairs": {"tcp_bw": {"n2": verdict["n2"]}}}
    slow = check_tcp_bw(ev, NodeContext("n2", profile, {}, meta))
    assert slow.status == "FAIL" and "known-good" in slow.reason, slow


def test_no_known_good_partner_blames_nobody():
    verdict, retries, _ = _attribute(["n1", "n2"], {"n2"})
    assert {v["status"] for v in verdict.values()} == {"unattributed"}
    assert len(retries) == 1  # the same pair once more, not once per member
