"""The systemd service + timer pair that runs `gpuboot scan` on a calendar.

ExecStart is an argument vector written per systemd.syntax: a word with white space is
double-quoted; a character systemd would interpret inside a word (``%`` specifiers, ``$``
variables, ``\\`` escapes, quotes, ``;``, control characters) is refused, never escaped,
so what runs is exactly what the operator gave. No shell is involved."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpuboot import __version__
from gpuboot.errors import BadInput
from gpuboot.schedule import EXIT_HOSTS_HELD, SCAN_EXITS, failing_codes, reported_codes

# What systemd would interpret inside a word of ExecStart=, Environment= or
# ReadWritePaths= (specifiers, variables, escapes, quoting, command separators), and
# every control character (a newline would start a new directive).
_INTERPRETED = re.compile(r"[%$\\\"';\x00-\x1f\x7f]")
UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
CALENDAR = re.compile(r"[A-Za-z0-9*:,./~ +-]{1,200}")


def word(value: str, where: str) -> str:
    """``value`` as one word of a systemd command line or list, or BadInput."""
    if not value or (found := _INTERPRETED.search(value)):
        bad = "an empty word" if not value else f"{found[0]!r}"  # type: ignore[index]
        raise BadInput(
            f"{value!r} holds {bad}, which systemd would interpret in a unit file",
            where=where,
            hint="rename or move that file, or choose a value without % $ \\ quotes ; or "
            "control characters (systemd.syntax)",
        )
    return f'"{value}"' if re.search(r"\s", value) else value


def command_line(argv: list[str], where: str) -> str:
    first = argv[0]
    if not first.startswith("/"):
        raise BadInput(
            f"{first!r} is not an absolute path",
            where=where,
            hint="give the gpuboot executable's absolute path (--gpuboot PATH)",
        )
    return " ".join(word(a, where) for a in argv)


def calendar(every: str) -> str:
    """An OnCalendar= value: a systemd shorthand (hourly, daily, ...) or a calendar
    event; systemd-analyze calendar checks its meaning (gpuboot.cli.schedule)."""
    if not CALENDAR.fullmatch(every):
        raise BadInput(
            f"--every {every!r} is not a systemd calendar event",
            where="--every",
            hint="e.g. --every hourly, --every daily or --every '*-*-* *:00/15:00' "
            "(systemd.time: CALENDAR EVENTS)",
        )
    return every


@dataclass(frozen=True)
class Units:
    """What the service runs and as whom."""

    name: str  # unit name without suffix, e.g. gpuboot-scan
    scan: list[str]  # the scan's argv, its executable absolute
    idle_check: list[str]  # the lock check's argv (ExecCondition=)
    every: str
    home: Path  # GPUBOOT_HOME of the unit
    writable: tuple[Path, ...]  # besides home: where the scan writes (textfile dir...)
    user: str | None = None
    description: str = ""


def check_names(units: Units) -> None:
    if not UNIT_NAME.fullmatch(units.name):
        raise BadInput(
            f"--name {units.name!r} is not a unit name",
            where="--name",
            hint="letters, digits, _ . - (at most 64), e.g. --name gpuboot-scan-hall1",
        )
    if units.user is not None and not USER_NAME.fullmatch(units.user):
        raise BadInput(
            f"--user {units.user!r} is not a user name systemd accepts here",
            where="--user",
            hint="a system user such as gpuboot (useradd --system gpuboot)",
        )


def service(units: Units) -> str:
    check_names(units)
    exec_start = command_line(units.scan, "ExecStart")
    exec_condition = command_line(units.idle_check, "ExecCondition")
    env = word(f"GPUBOOT_HOME={units.home}", "Environment")
    writable = " ".join(
        word(f"-{p}", "ReadWritePaths") for p in dict.fromkeys((units.home, *units.writable))
    )
    codes = " ".join(str(c) for c in reported_codes())
    why = "".join(f"\n#   {c}: {SCAN_EXITS[c].why}" for c in reported_codes())
    fails = "".join(f"\n#   {c}: {SCAN_EXITS[c].why}" for c in failing_codes())
    user = f"User={units.user}\n" if units.user else ""
    return f"""# {units.name}.service, written by gpuboot schedule (gpuboot {__version__}).
# Check it: systemd-analyze verify {units.name}.service {units.name}.timer
[Unit]
Description={units.description or "gpuboot compliance scan"}
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
{user}Environment={env}
# Ansible's local temporary files, in the unit's private /tmp (the home is read-only)
Environment=ANSIBLE_LOCAL_TEMP=/tmp/gpuboot-ansible
# Another gpuboot run (an install, a certify) holding these hosts: the check exits
# {EXIT_HOSTS_HELD}, this scan is skipped, the unit stays inactive and the journal names the
# holder. A run that takes the hosts between this check and the scan makes the scan
# exit 2 and the unit fail.
ExecCondition={exec_condition}
ExecStart={exec_start}
# Exit codes of a scan that ran and reported: its verdicts live in the history, the
# metrics and the alerts, not in the unit's state:{why}
# These fail the unit:{fails}
SuccessExitStatus={codes}
UMask=0077
# Hardening the scan keeps working under: it reads the inventory, its keys and ~/.ssh,
# reaches nodes and the API server over the network and writes only below these paths
# ("-": a missing one is left to gpuboot, which names it).
ReadWritePaths={writable}
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
PrivateDevices=yes
NoNewPrivileges=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
SystemCallArchitectures=native
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
"""


def timer(units: Units) -> str:
    check_names(units)
    return f"""# {units.name}.timer, written by gpuboot schedule (gpuboot {__version__}).
[Unit]
Description=Run {units.name}.service {units.every}

[Timer]
OnCalendar={calendar(units.every)}
# a scan missed while the controller was off runs once at boot
Persistent=true

[Install]
WantedBy=timers.target
"""


def files(units: Units) -> dict[str, str]:
    """File name -> text, the service and its timer."""
    return {f"{units.name}.service": service(units), f"{units.name}.timer": timer(units)}
