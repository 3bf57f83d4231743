"""The join gate and scan's gate never act on a node whose executor was lost: it was not
judged (UNKNOWN), so it is neither released nor taken out, and the run exits 8, not 1."""

from __future__ import annotations

import json

import pytest

from gpuboot import cli
from gpuboot.cli.outcome import EXIT_UNKNOWN
from gpuboot.executor import route
from tests.unit import test_engine_executors as through_executors

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

inv = through_executors.inv  # c1 from the controller; a1, a2 on executor ex1


@pytest.mark.parametrize("verb", ["certify", "scan"])
def test_the_gate_leaves_a_node_whose_executor_was_lost(inv, monkeypatch, kubeconfig, capsys, verb):
    monkeypatch.setattr(route, "preflight", lambda _inv, names: dict.fromkeys(names))
    monkeypatch.setattr(route, "executor", lambda _inv, _name: through_executors._cut(inv.parent))
    argv = [verb, "-i", str(inv), "--limit", "a1", "--kubeconfig", kubeconfig, "--json"]
    if verb == "scan":
        argv += ["--history", str(inv.parent / "history.jsonl")]
    code = cli.main(argv)
    doc = json.loads(capsys.readouterr().out)
    assert [n["verdict"] for n in doc["nodes"]] == ["UNKNOWN"]
    assert not doc.get("k8s_gate")  # no action on the node: not released, not taken out
    assert code == EXIT_UNKNOWN
