"""Every exit code gpuboot documents is decided for a scheduled scan: the unit's
SuccessExitStatus= and the CronJob's exit map come from that one decision."""

from __future__ import annotations

import re

from gpuboot import breaker, errors, scan
from gpuboot.schedule import (
    EXIT_HOSTS_HELD,
    NOT_FROM_SCAN,
    SCAN_EXITS,
    failing_codes,
    reported_codes,
)
from tests.paths import REPO


def _readme_codes() -> set[int]:
    text = (REPO / "README.md").read_text()
    table = text.split("### Exit codes", 1)[1].split("\n\n", 2)[1]
    return {int(m[1]) for m in re.finditer(r"^\| (\d+) \|", table, re.M)}


def _constants(*modules) -> set[int]:
    return {
        value
        for module in modules
        for name, value in vars(module).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }


def test_every_code_of_the_readme_table_is_decided():
    codes = _readme_codes()
    assert {0, 1, 2, 3, 4, 5, 6, 130} <= codes  # the table was read
    undecided = codes - set(SCAN_EXITS) - set(NOT_FROM_SCAN)
    assert not undecided, f"decide these for a scheduled scan: {sorted(undecided)}"


def test_every_exit_constant_a_scan_can_return_is_decided():
    from gpuboot.cli import outcome

    codes = _constants(errors, scan, breaker, outcome)
    undecided = codes - set(SCAN_EXITS) - set(NOT_FROM_SCAN)
    assert not undecided, f"decide these for a scheduled scan: {sorted(undecided)}"


def test_a_verdict_leaves_the_unit_succeeded_and_a_broken_run_fails_it():
    assert reported_codes() == [1, 4, 5, 6, 8, 130]
    assert failing_codes() == [errors.EXIT_BAD_INPUT, errors.EXIT_RUN_BROKE]
    assert 0 not in reported_codes() + failing_codes()  # 0 succeeds without saying so


def test_a_code_is_decided_once():
    assert not set(SCAN_EXITS) & set(NOT_FROM_SCAN)


def test_the_idle_checks_held_code_skips_the_unit_under_systemds_rules():
    """ExecCondition=: 1-254 skip the unit, but systemd counts SuccessExitStatus= codes
    as success there too: the held code must be none of them (a lab test saw exit 1 let
    the scan start)."""
    assert 1 <= EXIT_HOSTS_HELD <= 254
    assert EXIT_HOSTS_HELD not in reported_codes() and EXIT_HOSTS_HELD not in SCAN_EXITS
