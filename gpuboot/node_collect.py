"""One node's evidence over its transport: the collection script in one round trip,
cut off at the controller's deadline, the answer unpacked within limits.

Shared by certify's engine (gpuboot/engine.py) and the pytest-testinfra checks
(gpuboot/checks/conftest.py): one implementation, whatever started the run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuboot.bundle import names
from gpuboot.bundle.meta import node_meta
from gpuboot.bundle.model import Evidence
from gpuboot.collect import NodeAnswerRejected, script, state_probes, unpack
from gpuboot.errors import BadInput, GpubootError
from gpuboot.evidence import packages
from gpuboot.probes import Probe, node_probes, resolve_level
from gpuboot.profiles import load_profile
from gpuboot.remote import AnswerTooLarge, RemoteTimeout, run_with_deadline
from gpuboot.runner import failure_reason, last_line

# What a node's package manager answers: dpkg/apt on Debian (gpuboot.collect.PROBES), on
# RHEL/Rocky/Alma (gpuboot_os_family redhat) rpm, versionlock, the enabled module streams
# and the dnf-automatic timers instead, in the same round trip.
DEBIAN_PACKAGE_FILES = (names.DPKG_FILE, names.APT_HOLDS_FILE, names.APT_UNATTENDED_FILE)
EL_PACKAGE_PROBES = (
    Probe(names.RPM_FILE, packages.RPM_QUERY),
    Probe(names.DNF_VERSIONLOCK_FILE, packages.DNF_VERSIONLOCK_LIST),
    Probe(names.DNF_MODULES_FILE, packages.DNF_MODULE_LIST),
    Probe(names.DNF_AUTOMATIC_FILE, packages.DNF_AUTOMATIC_SHOW),
)


def package_probes(probes: Sequence[Probe], hostvars: dict[str, Any]) -> tuple[Probe, ...]:
    """``probes`` with the package manager's reads of the host's OS family."""
    if hostvars.get("gpuboot_os_family", "debian") != "redhat":
        return tuple(probes)
    kept = tuple(p for p in probes if p.file not in DEBIAN_PACKAGE_FILES)
    return kept + EL_PACKAGE_PROBES


# Beyond the probes' own `timeout`s: ssh set-up, the tar, a slow node. A tool stuck in
# the kernel (D state) outlives `timeout` on the node, and a hostile node may simply never
# answer: the controller's own deadline is what keeps one node from holding the run.
COLLECT_MARGIN_S = 60


class HostUnreachable(GpubootError):
    """Evidence could not be collected (SSH failed or the node's shell broke)."""


@dataclass
class NodeEvidence:
    """What one node answered, and the context its rules are judged in. ``evidence`` and
    ``meta`` are mutable: the pair phase adds its files and its attribution."""

    host: str
    evidence: Evidence
    hostvars: dict[str, Any]  # the inventory's, with gpuboot's derived variables applied
    meta: dict[str, Any]  # meta.json as the bundle keeps it
    profile: dict[str, Any] | None

    def entry(self) -> dict[str, Any]:
        """The pair phase's view (gpuboot.checks.pair_phase): the same dicts, not copies."""
        return {
            "evidence": self.evidence,
            "hostvars": self.hostvars,
            "meta": self.meta,
            "profile": self.profile,
        }


def boot_id_probe(hostvars: dict[str, Any]) -> Probe:
    """The node's boot id, which every reboot changes: scan counts reboots by it
    (gpuboot.escalation). Where the host sets the command gpuboot_reboot uses to see a reboot,
    that one (a lab container shares its host's boot_id)."""
    own = hostvars.get("gpuboot_reboot_boot_time_command")
    command = own if isinstance(own, str) and own.strip() else "cat /proc/sys/kernel/random/boot_id"
    return Probe(names.BOOT_ID_FILE, command, timeout=30)


# The controller's deadlines a host may set for itself (inventory variables, seconds):
# checked before any host is touched (check_deadlines).
DEADLINE_VARS = ("gpuboot_collect_timeout", "gpuboot_pair_timeout", "gpuboot_judge_timeout")


def host_deadline(hostvars: dict, var: str, default: float) -> float:
    """The host's own ``var`` (seconds), else ``default`` (also for a value check_deadlines
    refuses: the pytest-testinfra path reads hosts no engine checked)."""
    own = hostvars.get(var)
    return float(own) if _valid_deadline(own) else default


def _valid_deadline(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 86400


def check_deadlines(host: str, hostvars: dict, inventory: str = "") -> None:
    """BadInput naming the inventory, host and variable for a deadline that is not a number
    of seconds in range."""
    for var in DEADLINE_VARS:
        own = hostvars.get(var)
        if own is not None and not _valid_deadline(own):
            raise BadInput(
                f"{own!r} is not a deadline: a number of seconds, above 0 and at most 86400",
                where=": ".join(filter(None, (inventory, host, var))),
                hint=f"set {var}: 600 for {host} in the inventory, or remove it for the default",
            )


def collect_deadline(hostvars: dict, probes: Sequence[Probe]) -> float:
    """Seconds a node's collection may take: its probes' timeouts end to end plus a
    margin, or the host's ``gpuboot_collect_timeout``."""
    default = float(sum(p.timeout for p in probes) + COLLECT_MARGIN_S)
    return host_deadline(hostvars, "gpuboot_collect_timeout", default)


def collect_node(
    name: str, host: Any, hostvars: dict[str, Any], level_override: str | None = None
) -> NodeEvidence:
    """Collect ``name``'s evidence through ``host`` (anything with testinfra's
    ``run(command)``), ``hostvars`` as the inventory's view derives them (Inventory.resolved).
    Raises HostUnreachable, RemoteTimeout, AnswerTooLarge or NodeAnswerRejected, each naming
    the host: the caller keeps it as that host's ERROR."""
    procfs = hostvars.get("gpuboot_procfs", "/proc")
    sysfs = hostvars.get("gpuboot_sysfs", "/sys")
    profile = load_profile(hostvars["gpuboot_profile"]) if "gpuboot_profile" in hostvars else None
    level = resolve_level(hostvars, level_override)
    state = (*package_probes(state_probes(profile, hostvars), hostvars), boot_id_probe(hostvars))
    bandwidth = node_probes(profile, hostvars, level) if profile else []
    started = time.time()
    deadline = collect_deadline(hostvars, (*state, *bandwidth))
    try:
        cmd = run_with_deadline(
            host, script(procfs, sysfs, state, bandwidth), deadline, "evidence collection"
        )
    except (RemoteTimeout, AnswerTooLarge) as exc:
        exc.where = name
        raise
    except Exception as exc:  # ssh failed (testinfra: RuntimeError carrying the script)
        raise HostUnreachable(f"unreachable: {failure_reason(exc)}", where=name) from None
    payload = cmd.stdout.strip()
    if cmd.rc != 0 or not payload:
        why = last_line(cmd.stderr) or last_line(cmd.stdout) or f"exit {cmd.rc}"
        raise HostUnreachable(f"evidence collection failed (exit {cmd.rc}): {why}", where=name)
    try:
        evidence = unpack(payload, state, bandwidth)
    except NodeAnswerRejected as exc:
        exc.where = name
        raise
    commands = {p.file: p.command for p in (*state, *bandwidth)}
    meta = node_meta(name, hostvars, level, commands, started)
    return NodeEvidence(name, evidence, hostvars, meta, profile)
