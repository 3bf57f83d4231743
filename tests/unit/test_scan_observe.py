"""A scan reads a node's boot, faults and counters in the judging worker, right after the
rules and on their parses, instead of reading and parsing its bundle again: the same
observation either way, on real published captures, and it crosses the worker's pipe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuboot import engine, escalation, judging, scan, trends
from gpuboot.bundle.store import host_bundle, read_host_files
from gpuboot.certify import _judge_host
from gpuboot.results import NodeReport

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
HOSTS = sorted(
    p
    for kind in ("real-xid", "real-nvlink", "real-pcie-ecc", "real-h100-healthy")
    for p in (BUNDLES / kind).iterdir()
    if p.is_dir()
)


@pytest.mark.parametrize("host_dir", HOSTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_workers_observation_is_the_bundles(host_dir):
    evidence, _meta = host_bundle(read_host_files(host_dir), str(host_dir))
    judged = _judge_host(host_dir.parent, host_dir.name, None, None)  # the rules' parses
    seen, sample = scan._observe(evidence, judged)
    assert seen == escalation.observe_bundle(host_dir)
    assert sample == trends.observe_bundle(host_dir, judged.measurements)


def test_the_captures_compared_hold_faults_and_counters():
    """The comparison above is not one of empty observations."""
    seen = [
        scan._observe(
            host_bundle(read_host_files(p), str(p))[0], _judge_host(p.parent, p.name, None, None)
        )
        for p in HOSTS
    ]
    assert any(o.faults for o, _s in seen) and any(o.parts for o, _s in seen)
    assert any(s.read for _o, s in seen)


@pytest.mark.subprocess  # a judging worker is a forked process
def test_what_the_worker_observed_comes_back_with_the_report():
    def job() -> NodeReport:
        seen = escalation.Observation("b1", {"xid:79@0000:18:00": "Xid 79"}, {})
        return NodeReport("n1", "FAIL", (), observed=(seen, os.getpid()))

    back = judging.judge_within_deadlines({"n1": job}, lambda _n: 30.0, engine.unjudged)["n1"]
    seen, pid = back.observed
    assert seen.faults == {"xid:79@0000:18:00": "Xid 79"} and pid != os.getpid()
    assert "observed" not in back.to_dict()
