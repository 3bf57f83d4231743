"""Scheduled scans that ship: what `gpuboot schedule` writes (a systemd service + timer
pair, ``systemd``; a Kubernetes CronJob with what it needs, ``kubernetes``) and the one
decision both stand on: which of the scan's exit codes mean "the scan ran and said so"
(the unit stays inactive, the Job completes) and which mean a broken run or bad input
(the unit fails, the Job fails)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuboot import breaker, scan
from gpuboot.cli.outcome import EXIT_UNKNOWN
from gpuboot.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUN_BROKE

EXIT_INTERRUPTED = 130  # gpuboot.cli.boundary: Ctrl-C or SIGTERM
# `schedule --idle-check`: another run holds a host (sysexits' EX_TEMPFAIL: try later).
# systemd applies SuccessExitStatus= to ExecCondition= too: a code listed there would
# let the scan start, so this one is none of the scan's.
EXIT_HOSTS_HELD = 75


@dataclass(frozen=True)
class Decision:
    ran: bool  # the scan ran and reported: not a failure of the scheduled unit
    why: str


# Every exit code a scan documents (README "Exit codes", `gpuboot scan --help`), decided.
# A new code is a test failure (tests/unit/schedule) until it is decided here.
SCAN_EXITS: dict[int, Decision] = {
    EXIT_OK: Decision(True, "nothing failing"),
    scan.EXIT_NEW_DRIFT: Decision(
        True, "new drift: a verdict, reported by the history, metrics and alerts"
    ),
    EXIT_BAD_INPUT: Decision(False, "bad input: the unit's command or its files are wrong"),
    EXIT_RUN_BROKE: Decision(False, "the run broke (harness, disk, runner)"),
    scan.EXIT_UNJUDGED: Decision(True, "nothing new, a node or rule not judged"),
    scan.EXIT_STILL_FAILING: Decision(True, "still failing as at the last scan"),
    breaker.EXIT_BREAKER_OPEN: Decision(
        True, "a breaker is open: gpuboot holds back on purpose until a human resets it"
    ),
    EXIT_UNKNOWN: Decision(
        True,
        "nothing new, but a node not judged: its executor was lost (the next scan retries; "
        "metrics carry it as verdict UNKNOWN)",
    ),
    EXIT_INTERRUPTED: Decision(
        True,
        "stopped (systemctl stop, shutdown): a start timeout still fails the unit, as "
        "systemd's own result",
    ),
}


# Documented codes a scan never exits with: another verb's own.
NOT_FROM_SCAN: dict[int, str] = {
    7: "certify and cert verify: a partial certificate its policy does not accept",
}


def reported_codes() -> list[int]:
    """The non-zero codes that leave a scheduled scan succeeded: systemd's
    SuccessExitStatus=, the CronJob's exit-code map."""
    return sorted(code for code, d in SCAN_EXITS.items() if d.ran and code != EXIT_OK)


def failing_codes() -> list[int]:
    return sorted(code for code, d in SCAN_EXITS.items() if not d.ran)
