"""The breaker: a rule failing on many nodes for one reason in one run opens it (a shared
cause: the rule, profile, probe or a rollout), only FAIL counts, reasons are compared with
what differs between nodes normalised away, and its state file is written atomically and
never read as "closed" when it cannot be read."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime

import pytest

from gpuboot import breaker
from gpuboot.breaker import BreakerState, Trip, correlated, holds, normalise
from gpuboot.errors import ConfigError
from gpuboot.results import RunReport

NOW = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
UUID_A = "GPU-8f3c1d2e-1111-2222-3333-444455556666"
UUID_B = "GPU-00000000-aaaa-bbbb-cccc-ddddeeeeffff"


def _node(host: str, findings: dict[str, tuple[str, str]]) -> dict:
    rows = [
        {"rule": r, "title": r, "status": s, "reason": why, "action": "", "severity": "FAIL"}
        for r, (s, why) in findings.items()
    ]
    bad = [s for s, _ in findings.values() if s in ("FAIL", "ERROR")]
    verdict = "FAIL" if "FAIL" in bad else "ERROR" if bad else "PASS"
    return {"host": host, "verdict": verdict, "findings": rows, "measurements": []}


def _report(*nodes: dict) -> RunReport:
    return RunReport.from_dict({"run_id": "run-1", "nodes": list(nodes)})


def _fleet(total: int, failing: dict[str, tuple[str, str]], rule: str = "XID-001") -> RunReport:
    """``total`` nodes judged by ``rule``: those in ``failing`` fail it, the others pass."""
    nodes = []
    for i in range(1, total + 1):
        host = f"node{i}"
        status, why = failing.get(host, ("PASS", ""))
        nodes.append(_node(host, {rule: (status, why), "GPU-001": ("PASS", "")}))
    return _report(*nodes)


def _xid(code: int, pci: str) -> tuple[str, str]:
    return (
        "FAIL",
        f"Xid {code} ({'GPU has fallen off the bus' if code == 79 else 'DBE'}) on {pci}",
    )


# ------------------------------------------------------------------ correlation
def test_three_nodes_failing_one_rule_for_one_reason_trip_it():
    fails = {f"node{i}": _xid(79, f"0000:{16 + i:02x}:00.0") for i in (1, 2, 3)}
    (trip,) = correlated(_fleet(40, fails), now=NOW)
    assert (trip.rule, trip.nodes, trip.judged) == ("XID-001", ("node1", "node2", "node3"), 40)
    assert trip.reason == "Xid 79 (GPU has fallen off the bus) on <pci>"
    assert trip.opened_at == "2026-11-27T10:00:00Z" and trip.run_id == "run-1"


def test_two_nodes_of_twenty_do_not_trip():
    fails = {"node3": _xid(79, "0000:17:00.0"), "node9": _xid(79, "0000:18:00.0")}
    assert correlated(_fleet(20, fails)) == []


def test_four_of_five_with_the_same_xid_trip_and_the_alert_names_count_reason_and_fix():
    fails = {f"node{i}": _xid(79, "0000:17:00.0") for i in (1, 2, 3, 4)}
    (trip,) = correlated(_fleet(5, fails), now=NOW)
    assert trip.alert() == (
        "breaker open for XID-001: 4 of 5 nodes fail it for the same reason: Xid 79 (GPU has "
        "fallen off the bus) on <pci>; suspect the rule, profile, probe or a rollout before "
        "the hardware; after fixing: gpuboot breaker reset --rule XID-001"
    )


def test_a_share_of_the_judged_nodes_trips_a_small_run_but_one_node_never_does():
    two_of_five = {"node1": _xid(79, "0000:17:00.0"), "node2": _xid(79, "0000:18:00.0")}
    assert [t.nodes for t in correlated(_fleet(5, two_of_five))] == [("node1", "node2")]
    assert correlated(_fleet(1, {"node1": _xid(79, "0000:17:00.0")})) == []
    assert correlated(_fleet(5, {"node1": _xid(79, "0000:17:00.0")})) == []


def test_different_reasons_on_one_rule_are_independent_faults():
    fails = {"node1": _xid(79, "0000:17:00.0"), "node2": _xid(48, "0000:17:00.0")}
    fails["node3"] = _xid(79, "0000:18:00.0")
    assert correlated(_fleet(30, fails)) == []


def test_error_never_counts_towards_a_trip_nor_as_judged():
    fails = {f"node{i}": ("ERROR", "dmesg printed nothing") for i in range(1, 6)}
    assert correlated(_fleet(5, fails)) == []
    # three of five ERROR, two FAIL: the share is of the nodes the rule judged (2 of 2)
    fails.update({"node4": _xid(79, "0000:17:00.0"), "node5": _xid(79, "0000:18:00.0")})
    (trip,) = correlated(_fleet(5, fails))
    assert (trip.nodes, trip.judged) == (("node4", "node5"), 2)


def test_warn_does_not_count():
    fails = {f"node{i}": ("WARN", "Xid 92 (high SBE rate) on 0000:17:00.0") for i in (1, 2, 3)}
    assert correlated(_fleet(5, fails)) == []


def test_one_trip_per_rule_its_largest_group():
    fails = {f"node{i}": _xid(79, f"0000:1{i}:00.0") for i in (1, 2, 3)}
    fails.update({f"node{i}": _xid(48, "0000:17:00.0") for i in (4, 5, 6, 7)})
    (trip,) = correlated(_fleet(10, fails))
    assert trip.nodes == ("node4", "node5", "node6", "node7") and "Xid 48" in trip.reason


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("node1: 7 of 8 GPUs visible", "node22: 6 of 8 GPUs visible"),
        (f"{UUID_A} lost", f"{UUID_B} lost"),
        ("persistence mode off on GPU 0, 1, 3", "persistence mode off on GPU 5"),
        ("nvidia 550.54.15 loaded, pin 550.90.07", "nvidia 550.54.14 loaded, pin 550.90.07"),
        ("link 00000000:17:00.0 down", "link 0000:9a:00.0 down"),
        ("all_reduce 412.3 GB/s below 480", "all_reduce 398 GB/s below 480"),
    ],
)  # fmt: skip
def test_normalisation_makes_one_cause_on_different_nodes_one_reason(a, b):
    assert normalise(a, ["node1", "node22"]) == normalise(b, ["node1", "node22"])


def test_normalisation_keeps_what_names_the_fault():
    assert normalise("Xid 79 on 0000:17:00.0") != normalise("Xid 48 on 0000:17:00.0")
    assert normalise("SXid 20034 on switch 2") != normalise("SXid 12028 on switch 2")
    assert normalise("fabric manager inactive") != normalise("fabric manager failed")
    # a host name inside another word is not one; a digit inside a name is part of it
    assert normalise("node1x is fine", ["node1"]) == "node1x is fine"
    assert normalise("mlx5_0 down", ["node1"]) != normalise("mlx5_1 down", ["node1"])


# ------------------------------------------------------------------ holds
def test_a_node_is_held_only_when_every_rule_it_fails_is_an_open_breaker():
    trip = Trip("XID-001", "r", ("a", "b", "c"), 5, "t")
    report = _report(
        _node("only-open", {"XID-001": _xid(79, "0000:17:00.0")}),
        _node("also-error", {"XID-001": _xid(79, "0000:17:00.0"), "NVL-001": ("ERROR", "x")}),
        _node("another-fail", {"XID-001": _xid(79, "0000:17:00.0"), "NVL-001": ("FAIL", "x")}),
        _node("passing", {"XID-001": ("PASS", "")}),
        _node("error-only", {"XID-001": ("ERROR", "x")}),
    )
    held = holds(report, {"XID-001": trip})
    assert sorted(held) == ["also-error", "only-open"]
    assert "breaker open for XID-001" in held["only-open"]
    assert holds(report, {}) == {}


# ------------------------------------------------------------------ state file
def _trip(rule: str = "XID-001") -> Trip:
    return Trip(rule, "Xid 79 on <pci>", ("n1", "n2", "n3"), 5, "2026-11-27T10:00:00Z", "r1")


def test_trip_opens_once_and_reset_closes_and_remembers(tmp_path):
    state = BreakerState(tmp_path / "breaker.json")
    assert state.open_rules() == {}
    assert state.trip([_trip()]) == [_trip()]
    later = Trip("XID-001", "other", ("n4", "n5", "n6"), 9, "2026-11-28T00:00:00Z")
    assert state.trip([later, _trip("NVL-001")]) == [_trip("NVL-001")]  # XID-001 already open
    assert state.open_rules()["XID-001"] == _trip()  # the trip that opened it is kept
    assert state.reset("GPU-001") == []
    assert state.reset("XID-001", reason="profile fixed", now=NOW) == ["XID-001"]
    assert list(state.open_rules()) == ["NVL-001"]
    doc = json.loads((tmp_path / "breaker.json").read_text())
    (closed,) = doc["closed"]
    assert (closed["rule"], closed["reset_reason"], closed["closed_at"]) == (
        "XID-001",
        "profile fixed",
        "2026-11-27T10:00:00Z",
    )
    assert state.reset() == ["NVL-001"] and state.open_rules() == {}
    assert os.stat(tmp_path / "breaker.json").st_mode & 0o777 == 0o600


def test_the_state_defaults_to_gpuboot_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    BreakerState().trip([_trip()])
    assert (tmp_path / "home" / breaker.STATE_NAME).is_file()


def test_a_write_that_fails_leaves_the_previous_state_whole(tmp_path, monkeypatch):
    path = tmp_path / "breaker.json"
    state = BreakerState(path)
    state.trip([_trip()])
    before = path.read_bytes()

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(Exception, match="disk full"):
        state.trip([_trip("NVL-001")])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_concurrent_trips_all_land(tmp_path):
    """Read-change-write under the lock: no trip overwrites another's."""
    state = BreakerState(tmp_path / "breaker.json")
    rules = [f"R-{i:03d}" for i in range(12)]
    threads = [threading.Thread(target=state.trip, args=([_trip(r)],)) for r in rules]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(state.open_rules()) == rules


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"version": 1, "open": [], "closed": []}',
        '{"version": 2, "open": {}, "closed": []}',
        '{"version": 1, "open": {"XID-001": {"rule": "XID-001"}}, "closed": []}',
        '{"version": 1, "open": {"NVL-001": {"rule": "XID-001", "reason": "r", "nodes": [],'
        ' "judged": 1, "opened_at": "t"}}, "closed": []}',
        "[" * 5000 + "]" * 5000,  # nested past the bound: no RecursionError
    ],
)
def test_a_corrupt_state_is_an_error_naming_the_fix_never_closed(tmp_path, text):
    path = tmp_path / "breaker.json"
    path.write_text(text)
    state = BreakerState(path)
    for call in (state.open_rules, lambda: state.trip([_trip()]), lambda: state.trip([])):
        with pytest.raises(ConfigError) as err:
            call()
        assert err.value.where == str(path) and "gpuboot breaker reset" in err.value.hint
    with pytest.raises(ConfigError):
        state.reset("XID-001")
    assert path.read_text() == text  # nothing was written over it


def test_an_unreadable_state_is_set_aside_only_when_asked(tmp_path):
    path = tmp_path / "breaker.json"
    state = BreakerState(path)
    assert state.set_aside_unreadable() is None  # no file: nothing to set aside
    state.trip([_trip()])
    assert state.set_aside_unreadable() is None and path.exists()
    path.write_text("{torn")
    aside = state.set_aside_unreadable(now=NOW)
    assert aside == tmp_path / "breaker.json.unreadable-2026-11-27T100000Z"
    assert aside.read_text() == "{torn" and state.open_rules() == {}


def test_the_state_lives_beside_the_scan_history_it_judges(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    home = (tmp_path / "home").resolve()
    assert breaker.state_for(None) == home / "breaker.json"
    assert breaker.state_for(home / "scan-history.jsonl") == home / "breaker.json"
    other = tmp_path / "fleet-b" / "h.jsonl"
    assert breaker.state_for(other) == other.resolve().with_name("h.jsonl.breaker.json")


def test_a_history_s_directory_keeps_its_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    BreakerState(breaker.state_for(shared / "h.jsonl")).trip([_trip()])
    assert os.stat(shared).st_mode & 0o777 == 0o755  # only the state file is private
    assert os.stat(shared / "h.jsonl.breaker.json").st_mode & 0o777 == 0o600


def test_a_state_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    import os

    path = tmp_path / "breaker.json"
    os.mkfifo(path)
    with pytest.raises(ConfigError) as err:
        BreakerState(path).open_rules()
    assert "not a regular file" in err.value.message
