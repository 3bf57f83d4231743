"""patch.plan, pure: the Node patch for each kind of target, and the bounded actions list."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from gpuboot.k8s import labels as L
from gpuboot.k8s.decision import Target
from gpuboot.k8s.patch import append_action, plan, read_actions
from gpuboot_lab.kubeapi import node

NOW = 1_795_770_000
UNCERT = {"key": L.TAINT_KEY, "value": L.TAINT_VALUE, "effect": L.TAINT_EFFECT}
GPU_OP = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
FAILED_COND = {L.CONDITION_COMPLIANT: ("False", "RulesFailed", "failed: XID-079")}


def failing(**kw: Any) -> Target:
    """A scan's take-out of a node failing XID-079."""
    fields: dict[str, Any] = {
        "labels": {L.LABEL_CERTIFIED: "false", L.LABEL_FAILED_RULES: "XID-079"},
        "state": L.STATE_TAKEN_OUT,
        "conditions": FAILED_COND,
    }
    return Target(host="gpu-a01", verdict="FAIL", **{**fields, **kw})


def released(**kw: Any) -> Target:
    fields: dict[str, Any] = {
        "certified": True,
        "labels": {L.LABEL_CERTIFIED: "true", L.LABEL_FAILED_RULES: None},
        "cordon": "uncordon-ours",
    }
    return Target(host="gpu-a01", verdict="PASS", **{**fields, **kw})


def taken_out(*, cordoned: bool = False, others_cordon: bool = False) -> dict[str, Any]:
    """A node gpuboot took out earlier (with its cordon, or under someone else's)."""
    notes = {L.ANNOTATION_TAKEN_OUT_AT: str(NOW - 600), L.ANNOTATION_REASON: "failed: XID-079"}
    if cordoned:
        notes[L.ANNOTATION_CORDONED_BY] = L.CORDONED_BY_US
    if others_cordon:
        notes[L.ANNOTATION_WAS_UNSCHEDULABLE] = "true"
    return node(
        "gpu-a01",
        taints=[GPU_OP, UNCERT],
        labels={
            L.LABEL_CERTIFIED: "false",
            L.LABEL_FAILED_RULES: "XID-079",
            L.LABEL_STATE: L.STATE_TAKEN_OUT,
        },
        annotations=notes,
        unschedulable=cordoned or others_cordon,
    )


# ------------------------------------------------------------------ take-out


def test_a_scan_take_out_is_the_keyed_taint_only_not_a_cordon():
    todo = plan(node("gpu-a01", taints=[GPU_OP]), failing(cordon="cordon"), now=NOW)

    assert todo.body == {
        "metadata": {
            "labels": {
                L.LABEL_CERTIFIED: "false",
                L.LABEL_FAILED_RULES: "XID-079",
                L.LABEL_STATE: L.STATE_TAKEN_OUT,
            },
            "annotations": {
                L.ANNOTATION_TAKEN_OUT_AT: str(NOW),
                L.ANNOTATION_REASON: "failed: XID-079",
            },
            "resourceVersion": "100",
        },
        "spec": {"taints": [GPU_OP, UNCERT]},  # no unschedulable: the cordon bit is not ours
    }
    assert f"taint {L.TAINT_KEY}={L.TAINT_VALUE}:{L.TAINT_EFFECT} added" in todo.changes


def test_a_drain_cordons_too_and_marks_the_cordon_as_gpuboots():
    todo = plan(node("gpu-a01"), failing(drain=True), now=NOW)

    assert todo.body is not None
    assert todo.body["spec"] == {"taints": [UNCERT], "unschedulable": True}
    assert todo.body["metadata"]["annotations"] == {
        L.ANNOTATION_CORDONED_BY: L.CORDONED_BY_US,
        L.ANNOTATION_TAKEN_OUT_AT: str(NOW),
        L.ANNOTATION_REASON: "failed: XID-079",
    }
    assert "cordoned (spec.unschedulable=true)" in todo.changes


@pytest.mark.parametrize("drain", [False, True])
def test_a_node_someone_else_cordoned_is_recorded_as_already_unschedulable(drain: bool):
    todo = plan(node("gpu-a01", unschedulable=True), failing(drain=drain), now=NOW)

    assert todo.body is not None
    assert todo.body["spec"] == {"taints": [UNCERT]}  # the cordon is theirs: not claimed
    notes = todo.body["metadata"]["annotations"]
    assert notes[L.ANNOTATION_WAS_UNSCHEDULABLE] == "true"
    assert L.ANNOTATION_CORDONED_BY not in notes
    assert notes[L.ANNOTATION_TAKEN_OUT_AT] == str(NOW)


def test_a_node_already_out_keeps_the_time_it_was_taken_out():
    todo = plan(taken_out(), failing(), now=NOW)

    assert todo.body is None  # the same failure a scan later: nothing to write
    assert todo.changes == []


def test_a_drain_of_a_node_a_scan_took_out_keeps_the_first_take_out_time():
    todo = plan(taken_out(), failing(drain=True), now=NOW)

    assert todo.body is not None
    assert todo.body["spec"] == {"unschedulable": True}
    assert todo.body["metadata"]["annotations"] == {L.ANNOTATION_CORDONED_BY: L.CORDONED_BY_US}


def test_a_taint_from_registration_is_no_take_out_by_gpuboot():
    # the kubelet registered the node with the taint: gpuboot took nothing out, so the
    # take-out window (rebuilt from taken-out-at) must not count it
    todo = plan(node("gpu-a01", taints=[UNCERT]), failing(), now=NOW)

    assert todo.body is not None
    assert "spec" not in todo.body
    assert L.ANNOTATION_TAKEN_OUT_AT not in todo.body["metadata"]["annotations"]


def test_the_reason_follows_the_failure_and_stays_one_bounded_line():
    why = "failed: " + ", ".join(f"RULE-{i:03d}" for i in range(100)) + "\nsecond line"
    target = failing(conditions={L.CONDITION_COMPLIANT: ("False", "RulesFailed", why)})

    todo = plan(taken_out(), target, now=NOW)

    assert todo.body is not None
    reason = todo.body["metadata"]["annotations"][L.ANNOTATION_REASON]
    assert len(reason) == L.MAX_REASON and "\n" not in reason and reason.endswith("…")


def test_without_a_failing_condition_the_reason_is_the_verdict_and_the_failed_rules():
    target = failing(conditions={}, labels={L.LABEL_FAILED_RULES: "GPU-003_XID-079"})

    todo = plan(node("gpu-a01"), target, now=NOW)

    assert todo.body is not None
    assert todo.body["metadata"]["annotations"][L.ANNOTATION_REASON] == "FAIL: GPU-003, XID-079"


# ------------------------------------------------------------------ held back


@pytest.mark.parametrize("drain", [False, True])
def test_a_held_node_is_flagged_noncompliant_and_not_taken_out(drain: bool):
    todo = plan(node("gpu-a01"), failing(held="breaker open for XID-079", drain=drain), now=NOW)

    assert todo.body == {
        "metadata": {
            "labels": {
                L.LABEL_CERTIFIED: "false",
                L.LABEL_FAILED_RULES: "XID-079",
                L.LABEL_STATE: L.STATE_NONCOMPLIANT,
            },
            "annotations": {L.ANNOTATION_REASON: "breaker open for XID-079"},
            "resourceVersion": "100",
        },
    }  # no taint, no cordon, no take-out time: it stays in service


def test_a_held_node_keeps_what_gpuboot_already_put_on_it():
    before = taken_out(cordoned=True)

    todo = plan(before, failing(held="disruption budget: 1 of 1 unavailable"), now=NOW)

    assert todo.body is not None
    assert "spec" not in todo.body  # its taint and gpuboot's cordon stay
    assert todo.body["metadata"]["annotations"] == {
        L.ANNOTATION_REASON: "disruption budget: 1 of 1 unavailable"
    }


# ------------------------------------------------------------------ release


def test_a_release_lifts_the_taint_gpuboots_cordon_and_every_take_out_mark():
    todo = plan(taken_out(cordoned=True), released(), now=NOW)

    assert todo.body == {
        "metadata": {
            "labels": {
                L.LABEL_CERTIFIED: "true",
                L.LABEL_FAILED_RULES: None,
                L.LABEL_STATE: None,
            },
            "annotations": {
                L.ANNOTATION_CORDONED_BY: None,
                L.ANNOTATION_TAKEN_OUT_AT: None,
                L.ANNOTATION_REASON: None,
            },
            "resourceVersion": "100",
        },
        "spec": {"taints": [GPU_OP], "unschedulable": False},
    }


def test_a_release_leaves_a_cordon_gpuboot_did_not_make():
    todo = plan(taken_out(others_cordon=True), released(), now=NOW)

    assert todo.body is not None
    assert todo.body["spec"] == {"taints": [GPU_OP]}
    assert todo.body["metadata"]["annotations"] == {
        L.ANNOTATION_TAKEN_OUT_AT: None,
        L.ANNOTATION_WAS_UNSCHEDULABLE: None,
        L.ANNOTATION_REASON: None,
    }
    assert "stays cordoned: cordoned by someone else, not by gpuboot" in todo.notes


def test_a_cancel_clears_gpuboots_marks_after_a_human_undid_the_take_out():
    # a human uncordoned the node and removed gpuboot's taint: only the marks are left
    undone = taken_out(cordoned=True)
    undone["spec"] = {"taints": [GPU_OP]}
    cancel = Target(
        host="gpu-a01",
        verdict="FAIL",
        certified=True,
        cordon="uncordon-ours",
        annotations={L.ANNOTATION_CANCELLED_AT: str(NOW)},
    )

    todo = plan(undone, cancel, now=NOW)

    assert todo.body is not None
    assert "spec" not in todo.body
    assert todo.body["metadata"]["labels"] == {L.LABEL_STATE: None}
    assert todo.body["metadata"]["annotations"] == {
        L.ANNOTATION_CORDONED_BY: None,
        L.ANNOTATION_TAKEN_OUT_AT: None,
        L.ANNOTATION_REASON: None,
        L.ANNOTATION_CANCELLED_AT: str(NOW),
    }


# ------------------------------------------------------------------ invariants

TARGETS = [
    failing(),
    failing(drain=True),
    failing(cordon="cordon"),
    failing(held="budget"),
    released(),
    released(cordon="leave"),
    Target(host="gpu-a01", verdict="WARN", labels={L.LABEL_CERTIFIED: "false"}),
]


@pytest.mark.parametrize(("target", "marked"), list(itertools.product(TARGETS, [False, True])))
def test_a_cordon_gpuboot_did_not_make_is_never_lifted(target: Target, marked: bool):
    # someone else's cordon; ``marked``: gpuboot's take-out marks are on it too
    before = taken_out(others_cordon=True) if marked else node("gpu-a01", unschedulable=True)

    todo = plan(before, target, now=NOW)

    assert (todo.body or {}).get("spec", {}).get("unschedulable") is not False


@pytest.mark.parametrize("target", TARGETS)
def test_a_second_plan_on_the_patched_node_changes_nothing(target: Target):
    from gpuboot_lab.kubeapi import strategic_merge

    before = node("gpu-a01", taints=[GPU_OP])
    first = plan(before, target, now=NOW)
    after = strategic_merge(before, first.body) if first.body else before

    assert plan(after, target, now=NOW + 60).body is None


# ------------------------------------------------------------------ actions


def test_append_action_keeps_the_newest_ten_in_order():
    notes: dict[str, str] = {}
    for i in range(13):
        notes[L.ANNOTATION_ACTIONS] = append_action(notes, f"step{i}", "ok", NOW + i)

    kept = json.loads(notes[L.ANNOTATION_ACTIONS])
    assert [a["step"] for a in kept] == [f"step{i}" for i in range(3, 13)]
    assert kept[-1] == {"at": NOW + 12, "step": "step12", "result": "ok"}
    assert read_actions(notes) == kept


def test_append_action_bounds_each_entrys_words():
    value = append_action({}, "reboot", "failed: " + "x" * 500 + "\nmore", NOW)

    [entry] = json.loads(value)
    assert len(entry["result"]) == 120 and "\n" not in entry["result"]


@pytest.mark.parametrize("raw", ["not json", '{"at": 1}', '[{"step": "no time"}, 7]'])
def test_an_actions_annotation_edited_by_hand_reads_as_none(raw: str):
    notes = {L.ANNOTATION_ACTIONS: raw}

    assert read_actions(notes) == []
    assert [a["step"] for a in json.loads(append_action(notes, "reset", "ok", NOW))] == ["reset"]
