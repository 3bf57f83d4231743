"""The remediation ladder as a state machine: each step's failure leads to the next, a
fault back after a step starts higher, 3 actions in 7 days quarantine, a quarantined,
foreign-owned or cancelled node gets nothing; steps are recorded, never run here."""

from __future__ import annotations

import pytest

from gpuboot.remediate import ladder as LD

NOW = 1_800_000_000.0
DAY = 86400.0
XID79 = LD.Fault(key="xid:79@0000:3b:00", rules=("XID-001",), bucket="RESTART_BM")
XID48 = LD.Fault(
    key="xid:48@0000:3b:00", rules=("XID-001",), bucket="RESET_GPU", gpus=("0000:3b:00.0",)
)
FREE = LD.Facts()  # nothing stands in the way
DRIFT = LD.Fault(key="rules:STK-002", rules=("STK-002",), drifted=True)


class Node:
    """The injected steps: each returns the scripted result (FAILED when not scripted)
    and records what was asked."""

    def __init__(self, **results: str) -> None:
        self.results, self.asked = results, []

    def __call__(self, step: str) -> tuple[str, str]:
        self.asked.append(step)
        return self.results.get(step, LD.FAILED), f"{step} done"


def climb(fault, past=(), facts=FREE, **results):
    node = Node(**results)
    out = LD.climb(facts, fault, list(past), NOW, node)
    return out, node.asked


def test_a_passing_step_ends_the_climb():
    out, asked = climb(XID79, reboot=LD.PASSED)
    assert asked == ["reboot"] and out.outcome == LD.PASSED


@pytest.mark.parametrize(
    ("fault", "ladder"),
    [
        (XID79, ["reboot", "reinstall"]),  # 2 actions, then quarantine at the top
        (XID48, ["reset", "reboot", "reinstall"]),  # the catalogue: reboot if the reset fails
        (DRIFT, ["reconcile", "reinstall"]),
    ],
)
def test_each_failed_step_leads_to_the_next_then_quarantine(fault, ladder):
    out, asked = climb(fault)
    assert asked == [*ladder, "quarantine"]
    assert [s.result for s in out.steps] == [LD.FAILED] * len(ladder) + [LD.FAILED]


def test_reset_only_when_the_catalogue_says_reset_and_a_gpu_is_named():
    no_gpu = LD.Fault(key="xid:48@x", bucket="RESET_GPU")
    assert LD.applicable(no_gpu) == ["reboot", "reinstall", "quarantine"]
    assert LD.applicable(XID48)[:2] == ["reset", "reboot"]


def test_the_same_fault_back_after_a_step_moves_up_the_ladder():
    past = [LD.Past(NOW - DAY, "reboot", LD.PASSED, XID79.key)]
    _out, asked = climb(XID79, past, reinstall=LD.PASSED)
    assert asked == ["reinstall"]


def test_another_fault_starts_at_the_bottom():
    past = [LD.Past(NOW - DAY, "reboot", LD.PASSED, "xid:79@0000:af:00")]
    _out, asked = climb(XID79, past, reboot=LD.PASSED)
    assert asked == ["reboot"]


def test_a_fault_back_after_every_rung_is_quarantined():
    past = [
        LD.Past(NOW - 3 * DAY, "reboot", LD.PASSED, XID79.key),
        LD.Past(NOW - 2 * DAY, "reinstall", LD.PASSED, XID79.key),
    ]
    out, asked = climb(XID79, past)
    assert asked == ["quarantine"] and out.outcome == LD.FAILED


def test_three_actions_in_seven_days_quarantine_instead_of_a_fourth():
    past = [LD.Past(NOW - d * DAY, "reboot", LD.PASSED, f"xid:79@gpu{d}") for d in (1, 2, 3)]
    out, asked = climb(XID79, past)
    assert asked == ["quarantine"]
    assert "3 actions within 7 days" in out.steps[0].detail


def test_actions_older_than_seven_days_do_not_count():
    past = [LD.Past(NOW - d * DAY, "reboot", LD.PASSED, f"xid:79@gpu{d}") for d in (8, 9, 10)]
    _out, asked = climb(XID79, past, reboot=LD.PASSED)
    assert asked == ["reboot"]


def test_the_bound_counts_the_steps_of_this_climb_too():
    past = [LD.Past(NOW - DAY, "reconcile", LD.PASSED, "rules:other")]
    _out, asked = climb(XID48, past)
    # one earlier action + reset + reboot = 3: the next is the quarantine, not reinstall
    assert asked == ["reset", "reboot", "quarantine"]


def test_held_and_not_judged_steps_stop_the_climb_without_counting():
    out, asked = climb(XID79, reboot=LD.HELD)
    assert asked == ["reboot"] and out.outcome == LD.HELD
    out, asked = climb(XID79, reboot=LD.UNKNOWN)
    assert asked == ["reboot"] and out.outcome == LD.UNKNOWN  # no climbing on a harness error
    held = [LD.Past(NOW - h * 3600, "reboot", LD.HELD, XID79.key) for h in (1, 2, 3)]
    _out, asked = climb(XID79, held, reboot=LD.PASSED)
    assert asked == ["reboot"]  # held steps did nothing: neither counted nor "tried"


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        (LD.Facts(quarantined=True), "quarantined"),
        (LD.Facts(foreign="NVSentinel state label"), "owned by another tool"),
        (LD.Facts(cancelled="uncordoned by a human"), "cancelled by a human"),
        (LD.Facts(unreadable="API error 500"), "cannot read the node"),
    ],
)
def test_a_quarantined_foreign_or_cancelled_node_gets_nothing(facts, why):
    out, asked = climb(XID79, facts=facts)
    assert asked == [] and out.skipped.startswith(why) and out.outcome == "skipped"


def test_an_escalated_fault_goes_straight_to_quarantine():
    escalated = LD.Fault(key=XID79.key, bucket="RESTART_BM", escalated=True)
    _out, asked = climb(escalated)
    assert asked == ["quarantine"]


def test_a_release_starts_the_node_afresh():
    past = [
        LD.Past(NOW - 3 * DAY, "reboot", LD.FAILED, XID79.key),
        LD.Past(NOW - 3 * DAY + 1, "reinstall", LD.FAILED, XID79.key),
        LD.Past(NOW - 3 * DAY + 2, "quarantine", LD.DONE, XID79.key),
        LD.Past(NOW - DAY, "release", "done"),
    ]
    _out, asked = climb(XID79, past, reboot=LD.PASSED)
    assert asked == ["reboot"]


def test_a_dry_run_lists_the_whole_ladder_as_if_each_step_failed():
    out = LD.climb(LD.Facts(), XID48, [], NOW, lambda _s: (LD.WOULD, ""))
    assert [s.step for s in out.steps] == ["reset", "reboot", "reinstall", "quarantine"]
