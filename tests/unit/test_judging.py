"""gpuboot.judging: nodes judged in forked workers, one per core, each node within its
deadline."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from gpuboot import judging

pytestmark = pytest.mark.subprocess


def _late(name, exc):
    return ("late", name, exc.message)


def _pid():
    return os.getpid()


def test_many_nodes_are_judged_by_one_worker_per_core_not_a_fork_per_node():
    jobs = dict.fromkeys((f"n{i}" for i in range(24)), _pid)
    pids = judging.judge_within_deadlines(jobs, lambda _n: 60, _late)
    assert set(pids) == set(jobs)
    cores = min(len(os.sched_getaffinity(0)), judging.MAX_WORKERS)
    assert len(set(pids.values())) <= cores, pids
    assert os.getpid() not in pids.values()  # never judged in the controller itself
    assert not multiprocessing.active_children()


def test_a_node_past_its_deadline_is_late_and_the_others_are_judged_after_it():
    jobs = {"slow": lambda: time.sleep(600), **dict.fromkeys(("a", "b", "c", "d"), _pid)}
    started = time.monotonic()
    reports = judging.judge_within_deadlines(
        jobs, lambda n: 1 if n == "slow" else 60, _late, setting="gpuboot_judge_timeout"
    )
    assert time.monotonic() - started < 30
    kind, _name, why = reports.pop("slow")
    assert kind == "late" and "did not finish within 1s" in why and "gpuboot_judge_timeout" in why
    assert all(isinstance(pid, int) for pid in reports.values()), reports
    assert not multiprocessing.active_children()


def test_a_worker_that_dies_makes_its_node_late_and_the_others_are_judged():
    jobs = {"dies": lambda: os._exit(3), **dict.fromkeys(("a", "b", "c"), _pid)}
    reports = judging.judge_within_deadlines(jobs, lambda _n: 60, _late)
    assert reports.pop("dies") == ("late", "dies", "judging ended without a verdict: exit 3")
    assert all(isinstance(pid, int) for pid in reports.values()), reports


def test_a_rule_that_raises_raises_and_leaves_no_worker():
    def broken():
        raise ValueError("a rule's bug")

    with pytest.raises(ValueError, match="a rule's bug"):
        judging.judge_within_deadlines({"a": _pid, "b": broken, "c": _pid}, lambda _n: 60, _late)
    assert not multiprocessing.active_children()
