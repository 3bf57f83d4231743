"""`gpuboot breaker status|reset`: what is open and why, exit 6 while a breaker is open, a
reset that closes and remembers, a typo refused, and an unreadable state named with its fix
(never shown as "no breaker open")."""

from __future__ import annotations

import json

import pytest

from gpuboot import cli
from gpuboot.breaker import EXIT_BREAKER_OPEN, BreakerState, Trip


@pytest.fixture
def state(tmp_path, monkeypatch) -> BreakerState:
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    return BreakerState()


def _trip(rule: str = "XID-001") -> Trip:
    return Trip(rule, "Xid 79 (GPU has fallen off the bus) on <pci>", ("n1", "n2", "n3", "n4"),
                5, "2026-11-27T10:00:00Z", "20261127-100000-scan-ab12")  # fmt: skip


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_status_with_nothing_open_exits_0(state, capsys):
    code, out, _ = _run(capsys, "breaker", "status", "--json")
    assert code == 0 and json.loads(out) == {"state": str(state.path), "open": []}
    assert _run(capsys, "breaker")[0] == 0  # status is the default action


def test_status_names_each_open_breaker_and_exits_6(state, capsys):
    state.trip([_trip(), _trip("NVL-001")])
    code, out, _ = _run(capsys, "breaker", "status")
    assert code == EXIT_BREAKER_OPEN == 6
    assert "breaker open for XID-001: 4 of 5 nodes fail it for the same reason: Xid 79" in out
    assert "gpuboot breaker reset --rule XID-001" in out and "nodes: n1, n2, n3, n4" in out
    code, out, _ = _run(capsys, "breaker", "status", "--json")
    doc = json.loads(out)
    assert code == 6 and [t["rule"] for t in doc["open"]] == ["NVL-001", "XID-001"]
    assert doc["open"][1]["nodes"] == ["n1", "n2", "n3", "n4"] and doc["open"][1]["judged"] == 5


def test_reset_one_rule_then_all(state, capsys):
    state.trip([_trip(), _trip("NVL-001")])
    code, out, _ = _run(capsys, "breaker", "reset", "--rule", "XID-001", "--reason", "fixed")
    assert code == 0 and "closed: XID-001" in out and "still open: NVL-001" in out
    assert list(state.open_rules()) == ["NVL-001"]
    code, out, _ = _run(capsys, "breaker", "reset", "--json")
    assert code == 0 and json.loads(out)["closed"] == ["NVL-001"] and state.open_rules() == {}
    closed = json.loads(state.path.read_text())["closed"]
    assert [(c["rule"], c["reset_reason"]) for c in closed] == [("XID-001", "fixed"),
                                                                  ("NVL-001", None)]  # fmt: skip
    code, out, _ = _run(capsys, "breaker", "reset", "--rule", "XID-001")
    assert code == 0 and "no breaker open for XID-001" in out  # a known rule, not open


def test_reset_of_a_rule_gpuboot_does_not_have_is_bad_input(state, capsys):
    state.trip([_trip()])
    code, _, err = _run(capsys, "breaker", "reset", "--rule", "XID-01")
    assert code == 2 and "--rule: 'XID-01' is not a rule id" in err
    assert "hint: gpuboot breaker reset --rule XID-001" in err
    assert list(state.open_rules()) == ["XID-001"]


def test_an_unreadable_state_is_an_error_with_its_fix_and_reset_sets_it_aside(state, capsys):
    state.path.parent.mkdir(parents=True)
    state.path.write_text('{"version": 1, "open": {"XID-001": 7}, "closed": []}')
    code, out, err = _run(capsys, "breaker", "status")
    assert code == 2 and out == "" and str(state.path) in err
    assert "hint: restore the file from a backup, or close every breaker" in err
    assert "gpuboot breaker reset" in err
    assert _run(capsys, "breaker", "reset", "--rule", "XID-001")[0] == 2  # needs the whole fix
    code, out, _ = _run(capsys, "breaker", "reset", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["unreadable_set_aside"].startswith(f"{state.path}.unreadable-")
    assert _run(capsys, "breaker", "status")[0] == 0
