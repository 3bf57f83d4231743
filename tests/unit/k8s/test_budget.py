"""The disruption gate's arithmetic, pure: what counts as out, pools, domains, the window."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuboot.checks.base import Finding
from gpuboot.errors import BadInput
from gpuboot.k8s import labels as L
from gpuboot.k8s.budget import (
    DisruptionGate,
    Limits,
    amount,
    cause,
    census,
    critical,
    severity_order,
)
from gpuboot.results import NodeReport

NOW = 1_800_000_000.0
OURS = {"key": L.TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    ready: str | None = "True",
    taken_out_at: float | None = None,
) -> dict[str, Any]:
    annotations = {}
    if taken_out_at is not None:
        annotations[L.ANNOTATION_TAKEN_OUT_AT] = str(int(taken_out_at))
    doc: dict[str, Any] = {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "spec": {"taints": taints or [], **({"unschedulable": True} if unschedulable else {})},
        "status": {"conditions": [{"type": "Ready", "status": ready}] if ready else []},
    }
    return doc


def fleet(count: int, **kw: Any) -> list[dict[str, Any]]:
    return [node(f"n{i:03d}", **kw) for i in range(count)]


def taken_out(doc: dict[str, Any], at: float) -> dict[str, Any]:
    """``doc`` as gpuboot's take-out leaves it: its taint and the time."""
    doc["spec"]["taints"].append(OURS)
    doc["metadata"]["annotations"][L.ANNOTATION_TAKEN_OUT_AT] = str(int(at))
    return doc


# ------------------------------------------------------------------ limits


@pytest.mark.parametrize(
    ("spec", "total", "expected"),
    [("10%", 100, 10), ("10%", 19, 1), ("10%", 5, 1), ("2.5%", 200, 5), ("3", 100, 3)],
)
def test_a_percentage_of_the_pool_rounds_down_and_is_at_least_one(spec, total, expected):
    assert amount(spec, total) == expected


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"max_unavailable": "0"}, "--max-unavailable"),
        ({"max_unavailable": "ten"}, "--max-unavailable"),
        ({"max_unavailable": "150%"}, "--max-unavailable"),
        ({"max_unavailable": "0%"}, "--max-unavailable"),
        ({"max_new": "-1"}, "--max-new-takeouts"),
        ({"window_s": 0}, "--takeout-window"),
        ({"per_domain": 2}, "--max-unavailable-per-domain"),  # no --domain-label
        ({"per_domain": 0, "domain_label": "rack"}, "--max-unavailable-per-domain"),
        ({"domain_label": "bad key!"}, "--domain-label"),
        ({"pool_label": "/x"}, "--pool-label"),
        ({"ignore_taints": ("a b",)}, "--ignore-taint"),
    ],
)
def test_bad_limits_are_bad_input_naming_the_option_and_the_fix(kw, flag):
    with pytest.raises(BadInput) as info:
        Limits(**kw)
    assert info.value.where == flag
    assert "e.g. --" in (info.value.hint or "")  # the fix, as a flag to type


def test_a_domain_label_limits_each_domain_to_one_by_default():
    assert Limits().domain_cap is None
    assert Limits(domain_label="rack").domain_cap == 1
    assert Limits(domain_label="rack", per_domain=2).domain_cap == 2


# ------------------------------------------------------------------ what counts as out


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (node("a"), None),
        (node("a", unschedulable=True), "cordoned"),
        (node("a", taints=[OURS]), "gpuboot"),
        (node("a", ready="False"), "NotReady"),
        (node("a", ready="Unknown"), "Ready Unknown"),
        (node("a", ready=None), None),  # no Ready reported: nothing says it is out
        (node("a", taints=[{"key": "maintenance", "effect": "NoExecute"}]), "taint maintenance"),
        (
            node("a", taints=[{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]),
            "taint node.kubernetes.io/disk-pressure",
        ),
        # a preference is not unavailability; the GPU dedication taint keeps others off only
        (node("a", taints=[{"key": "maintenance", "effect": "PreferNoSchedule"}]), None),
        (node("a", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), None),
        # the lifecycle controller's mirror of Ready: one cause, not two
        (
            node(
                "a",
                ready="False",
                taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}],
            ),
            "NotReady",
        ),
        (
            node(
                "a",
                ready="Unknown",
                taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
            ),
            "Ready Unknown",
        ),
        (
            node("a", taints=[{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
            "cordoned",
        ),
    ],
)
def test_every_kind_of_unavailable_node_counts_once(doc, expected):
    assert cause(doc) == expected


def test_an_operator_can_name_more_dedication_taints():
    doc = node("a", taints=[{"key": "dedicated", "effect": "NoSchedule"}])
    assert cause(doc) == "taint dedicated"
    assert cause(doc, ("nvidia.com/gpu", "dedicated")) is None


def test_the_census_counts_each_node_once_and_rebuilds_the_window_from_the_nodes():
    nodes = [
        node("a", unschedulable=True, ready="False"),
        taken_out(node("b"), NOW - 100),
        taken_out(node("c"), NOW - 700),  # out, but taken out before the window
        node("d"),
        node("e", taken_out_at=NOW + 30),  # a clock ahead of ours: counts, erring safe
    ]
    nodes[3]["metadata"]["annotations"][L.ANNOTATION_TAKEN_OUT_AT] = "yesterday"

    seen = census(nodes, now=NOW, window_s=600)

    assert seen.unavailable == {"a": "cordoned", "b": "gpuboot", "c": "gpuboot"}
    assert seen.recent_takeouts == [("b", NOW - 100), ("e", NOW + 30)]


def test_a_take_out_the_node_was_released_from_still_counts_once_in_its_window():
    released = node("a")
    released["metadata"]["annotations"][L.ANNOTATION_ACTIONS] = json.dumps(
        [
            {"at": int(NOW - 900), "step": "take-out", "result": "failed: XID-001"},
            {"at": int(NOW - 200), "step": "take-out", "result": "failed: XID-001"},
            {"at": int(NOW - 100), "step": "reboot", "result": "passed"},
            {"at": int(NOW - 50), "step": "take-out", "result": "failed: XID-001"},
        ]
    )
    mangled = node("b")
    mangled["metadata"]["annotations"][L.ANNOTATION_ACTIONS] = "{not json"

    seen = census([released, mangled], now=NOW, window_s=600)

    assert seen.unavailable == {}
    assert seen.recent_takeouts == [("a", NOW - 50)]


# ------------------------------------------------------------------ admission


def test_max_unavailable_counts_every_cause_and_admitted_nodes():
    nodes = fleet(100)
    for doc in nodes[:5]:
        doc["spec"]["unschedulable"] = True  # another tool's cordons
    for doc in nodes[5:8]:
        doc["status"]["conditions"][0]["status"] = "False"
    gate = DisruptionGate(nodes, Limits(max_unavailable="10", max_new="100%"), now=NOW)

    assert gate.admit("n050") is None
    assert gate.admit("n051") is None
    assert gate.admit("n052") == ("held back: 10 of 100 nodes unavailable, --max-unavailable 10")
    assert gate.admit("n000") is None  # already out: no admission needed


def test_each_pool_has_its_own_percentage():
    nodes = fleet(20, labels={"pool": "big"}) + [
        node(f"s{i}", labels={"pool": "small"}) for i in range(5)
    ]
    gate = DisruptionGate(nodes, Limits(pool_label="pool", max_new="100%"), now=NOW)

    assert gate.admit("s0") is None  # 10% of 5 rounds down to 0: at least 1
    assert gate.admit("s1") == (
        "held back: 1 of 5 nodes of pool pool=small unavailable, --max-unavailable 10%"
    )
    assert gate.admit("n000") is None
    assert gate.admit("n001") is None  # 10% of 20
    assert gate.admit("n002") is not None


def test_a_failure_domain_never_has_two_nodes_out():
    nodes = [node(f"r{r}{x}", labels={"rack": f"r{r}"}) for r in range(4) for x in "ab"]
    nodes[0]["spec"]["unschedulable"] = True  # r0a: someone else's cordon
    gate = DisruptionGate(
        nodes, Limits(max_unavailable="100%", max_new="100%", domain_label="rack"), now=NOW
    )

    assert gate.admit("r0b") == (
        "held back: 1 of 2 nodes of domain rack=r0 unavailable, --max-unavailable-per-domain 1"
    )
    assert gate.admit("r1a") is None
    assert gate.admit("r1b") is not None
    assert gate.admit("r2b") is None


def test_new_take_outs_per_window_include_those_before_a_restart():
    nodes = fleet(100)
    for doc in nodes[:4]:
        taken_out(doc, NOW - 300)  # a run killed after 4 take-outs

    restarted = DisruptionGate(nodes, Limits(max_new="5", max_unavailable="50%"), now=NOW)

    assert restarted.admit("n010") is None  # the 5th
    assert restarted.admit("n011") == (
        "held back: gpuboot took out 5 of 100 nodes in the last 600 s, --max-new-takeouts 5 "
        "per --takeout-window 600"
    )
    later = DisruptionGate(nodes, Limits(max_new="5", max_unavailable="50%"), now=NOW + 301)
    assert later.admit("n011") is None  # the first 4 have left the window


def test_a_node_not_in_the_list_is_never_admitted():
    gate = DisruptionGate(fleet(3), Limits(), now=NOW)
    assert "not in the node list" in (gate.admit("ghost") or "")


# ------------------------------------------------------------------ worst first


def report(host: str, verdict: str, *findings: tuple[str, str, str]) -> NodeReport:
    return NodeReport(
        host,
        verdict,
        tuple(Finding(rule, rule, status, reason) for rule, status, reason in findings),
    )


def test_the_worst_verdicts_go_first():
    warn = report("w", "WARN", ("BW-002", "WARN", "low"))
    fail = report("f", "FAIL", ("NIC-001", "FAIL", "port down"))
    lost = report("l", "FAIL", ("GPU-001", "FAIL", "GPU 0000:1b:00.0 lost: Unable to determine"))
    xid = report("x", "FAIL", ("XID-001", "FAIL", "Xid 79 (GPU has fallen off the bus) on 1b"))
    error = report("e", "ERROR", ("BW-004", "ERROR", "cannot judge"))
    warn_xid = report("wx", "WARN", ("XID-001", "WARN", "Xid 79 listed as info"))

    ordered = severity_order([warn, fail, error, lost, warn_xid, xid])

    assert [n.host for n in ordered] == ["l", "x", "f", "e", "w", "wx"]
    assert critical(xid) == "XID-001: Xid 79 (GPU fallen off the bus)"
    assert critical(lost) == "GPU-001: a GPU is lost"
    assert critical(fail) is None and critical(warn_xid) is None
