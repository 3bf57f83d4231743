"""The take-out invariants, held over any sequence of what happens to a fleet: a state
machine (hypothesis) of faults, recoveries, other tools' cordons, a human undoing
gpuboot's take-out, the breaker holding and resetting, restarts and time passing, driving
the scan and certify gates against the fake API server.

After every gpuboot action:
- gpuboot never takes a node out that puts the unavailable nodes (whoever made them so)
  above the limit, nor a second node of one failure domain out, nor more new take-outs in
  a window than allowed (a restart included: the window is read back from the nodes);
- a node that recovered is released by the next certify (a cancel's cool-down only ever
  keeps gpuboot's hands off a node, never its taint on);
- gpuboot never uncordons a node it did not cordon.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpuboot.k8s import labels as L
from gpuboot.k8s.budget import Limits, census
from gpuboot_lab.kubeapi import FakeApiServer, node

from .conftest import Reports, finding, gate_args

if importlib.util.find_spec("kubernetes") is None:
    pytest.skip("the k8s extra (kubernetes client) is not installed", allow_module_level=True)

NODES = tuple(f"r{r}{x}" for r in range(3) for x in "ab")  # three racks of two
RACK = {name: name[:2] for name in NODES}
LIMITS = Limits(max_unavailable="2", max_new="2", window_s=600, domain_label="rack")
MAX_OUT, MAX_NEW = 2, 2
T0 = datetime(2026, 11, 22, 11, 0, tzinfo=UTC).timestamp()
BREAKER = "breaker open for XID-001: suspect the rule, profile, probe or a rollout"

node_names = st.sampled_from(NODES)


def _ours(doc: dict) -> bool:
    return any(t.get("key") == L.TAINT_KEY for t in doc["spec"].get("taints") or [])


class TakeOuts(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuboot-takeouts-"))
        self.api = FakeApiServer().start()
        self.kubeconfig = str(self.api.write_kubeconfig(self.tmp / "kubeconfig"))
        self.reports = Reports(self.tmp / "runs")
        for name in NODES:
            self.api.add(node(name, labels={"rack": RACK[name]}))
        self.now = T0
        self.faulty: set[str] = set()
        self.breaker = False
        self.takeouts: list[tuple[str, float]] = []  # (node, when), every take-out seen

    def teardown(self) -> None:
        self.api.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -------------------------------------------------------------- the world
    @rule(names=st.sets(node_names, min_size=1, max_size=4))
    def fail(self, names: set[str]) -> None:
        self.faulty |= names  # a bad hour: several at once, found by the next scan
        self.scan()

    @rule(names=st.sets(node_names, min_size=1, max_size=3))
    def recover(self, names: set[str]) -> None:
        self.faulty -= names

    @rule(name=node_names)
    def foreign_cordon(self, name: str) -> None:
        self.api.edit(name, lambda doc: doc["spec"].update(unschedulable=True))

    @rule(name=node_names)
    def human_uncordon(self, name: str) -> None:
        """A human puts the node back: lifts any cordon and gpuboot's taint."""

        def back(doc: dict) -> None:
            doc["spec"]["unschedulable"] = False
            doc["spec"]["taints"] = [
                t for t in doc["spec"].get("taints") or [] if t.get("key") != L.TAINT_KEY
            ]

        self.api.edit(name, back)

    @rule(seconds=st.sampled_from([60, 300, 700, 3700]))
    def time_passes(self, seconds: int) -> None:
        self.now += seconds

    @rule()
    def breaker_trips(self) -> None:
        self.breaker = True

    @rule()
    def breaker_reset(self) -> None:
        self.breaker = False

    # -------------------------------------------------------------- gpuboot
    def _act(self, run, certs, hold) -> None:
        from gpuboot.k8s import apply_gate

        before = {n: dict(d["spec"]) for n, d in self.api.nodes.items()}
        out_before = set(
            census(list(self.api.nodes.values()), now=self.now, window_s=600).unavailable
        )
        stamps = {n: self._stamp(n) for n in NODES}
        actions = apply_gate(
            run,
            certificates=certs,
            kubeconfig=self.kubeconfig,
            now=datetime.fromtimestamp(self.now, UTC),
            limits=LIMITS,
            hold=hold,
        )
        assert all(a.error is None for a in actions), [a.error for a in actions]
        new = [n for n in NODES if self._stamp(n) and self._stamp(n) != stamps[n]]
        self.takeouts += [(n, self.now) for n in new]
        out = set(census(list(self.api.nodes.values()), now=self.now, window_s=600).unavailable)
        added = out - out_before
        if added:  # gpuboot made a node unavailable: within every limit
            assert len(out) <= MAX_OUT, (added, out)
            for rack in {RACK[n] for n in added}:
                assert len([n for n in out if RACK[n] == rack]) <= 1, (rack, out)
        recent = {n for n, at in self.takeouts if at > self.now - 600}
        assert len(recent) <= MAX_NEW, self.takeouts
        for name, spec in before.items():  # a cordon gpuboot did not make stays
            annotations = self.api.nodes[name]["metadata"].get("annotations") or {}
            if spec.get("unschedulable") and annotations.get(L.ANNOTATION_CORDONED_BY) is None:
                assert self.api.nodes[name]["spec"].get("unschedulable"), name

    def _stamp(self, name: str) -> str | None:
        return (self.api.nodes[name]["metadata"].get("annotations") or {}).get(
            L.ANNOTATION_TAKEN_OUT_AT
        )

    def _hold(self) -> dict[str, str]:
        return {n: BREAKER for n in self.faulty} if self.breaker else {}

    @rule()
    def scan(self) -> None:
        if not self.faulty:
            return  # a scan hands only failing nodes to the gate
        report = self.reports.make(
            dict.fromkeys(sorted(self.faulty), "FAIL"),
            findings={n: [finding("XID-001", "FAIL")] for n in self.faulty},
        )
        run, certs = gate_args(report)
        self._act(run, certs, self._hold())

    @rule()
    def restart_and_scan(self) -> None:
        """A restarted gpuboot: nothing carried over but what is on the nodes."""
        self.now += 1
        self.scan()

    @rule()
    def certify(self) -> None:
        verdicts = {n: "FAIL" if n in self.faulty else "PASS" for n in NODES}
        report = self.reports.make(
            verdicts, findings={n: [finding("XID-001", "FAIL")] for n in self.faulty}
        )
        run, certs = gate_args(report)
        self._act(run, certs, self._hold())
        for name in NODES:  # a node that recovered is back in service
            if name not in self.faulty:
                doc = self.api.nodes[name]
                assert not _ours(doc), name
                assert L.LABEL_STATE not in doc["metadata"]["labels"], name

    @invariant()
    def nothing_of_gpuboot_on_a_node_it_left_alone(self) -> None:
        for name in NODES:
            doc = self.api.nodes[name]
            if _ours(doc):
                assert (doc["metadata"].get("annotations") or {}).get(L.ANNOTATION_TAKEN_OUT_AT), (
                    name
                )


TakeOuts.TestCase.settings = settings(
    max_examples=20,
    stateful_step_count=10,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_take_out_invariants = TakeOuts.TestCase
