"""`gpuboot install`: validate, then converge the inventory with the install playbook."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuboot import paths
from gpuboot.errors import BadInput
from gpuboot.inventory import Inventory, load_inventory, match_hosts
from gpuboot.rollout import RolloutState, batch_size, batches, failure_budget, resume_hosts
from gpuboot.runner import HostResult, RunSpec, broken_hosts, hosts_doc, new_run_dir, run

PLAYBOOK = paths.PROJECT_DIR / "playbooks" / "install.yml"


def stack_overlay(inv: Inventory, run_dir: Path) -> Path | None:
    """An inventory layered after the operator's: the role variables gpuboot derives for
    each host (its stack's pins, its profile's RoCE rails).

    Stacks and profiles were resolved and checked in Python (inventory.py), so the roles
    receive plain, already-validated variables and never parse gpuboot's files.
    """
    if not any(inv.derived_vars.values()):
        return None
    overlay = run_dir / "stack-vars.yml"
    # str(): ansible-core 2.19 hands out host names as a str subclass yaml cannot dump.
    hosts = {str(host): dict(role_vars) for host, role_vars in inv.derived_vars.items()}
    overlay.write_text(
        "# Written by gpuboot install: role variables derived from each host's stack and profile.\n"
        + yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=True)
    )
    return overlay


@dataclass
class InstallResult:
    """Every batch's hosts folded into one result, plus the rollout's own record."""

    run_id: str
    run_dir: Path
    elapsed_s: float
    hosts: dict[str, HostResult]
    rollout: RolloutState
    resumed_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "elapsed_s": round(self.elapsed_s, 2),
            "hosts": hosts_doc(self.hosts),
            "rollout": self.rollout.to_dict(),
            "resumed_from": self.resumed_from,
        }


def install(
    inventory: str,
    *,
    limit: str | None = None,
    tags: tuple[str, ...] = (),
    forks: int = 10,
    check: bool = False,
    diff: bool = False,
    serial: str | None = None,
    max_fail: str | None = None,
    resume: str | None = None,
    allow_reboot: bool = False,
    on_update: Callable[[dict[str, HostResult]], None] | None = None,
) -> InstallResult:
    """Converge the inventory batch by batch; stop once more hosts failed than the budget.

    Bad input (inventory, stack, --serial/--max-fail, the run to resume) is refused before
    any host is contacted. Without --serial the whole selection is one batch.
    """
    inv = load_inventory(inventory)  # refuses bad input before any host is contacted
    hosts = match_hosts(inv.path, limit) if limit else list(inv.hosts)
    if not hosts:
        raise BadInput(
            f"--limit {limit!r} matches no host of the inventory",
            where=str(inv.path),
            hint="use a host or group name the inventory defines",
        )
    resumed_from = None
    if resume:
        resumed_from, redo = resume_hosts(inv.path, resume)
        hosts = [h for h in hosts if h in redo]
    size = batch_size(serial, max(len(hosts), 1))
    state = RolloutState(
        inventory=str(inv.path.resolve()),
        hosts=hosts,
        batch_size=size,
        budget=failure_budget(max_fail, len(hosts)),
        check=check,
    )
    started = time.monotonic()
    run_id, run_dir = new_run_dir("install")
    overlay = stack_overlay(inv, run_dir)
    results: dict[str, HostResult] = {h: HostResult(host=h, pending=True) for h in hosts}
    state.save(run_dir)
    for number, batch in enumerate(batches(hosts, size), start=1):
        if state.budget_spent:
            state.stopped = (
                f"{len(state.failed)} host(s) failed, more than --max-fail allows "
                f"({state.budget}); {len(state.pending)} host(s) not started"
            )
            break
        spec = RunSpec(
            playbook=PLAYBOOK,
            inventory=(inv.path, overlay) if overlay else (inv.path,),
            label="install",
            limit=",".join(batch),
            tags=tags,
            forks=forks,
            check=check,
            diff=diff,
            extravars={"gpuboot_allow_reboot": allow_reboot},
        )
        sub = run_dir if size >= len(hosts) else run_dir / f"batch-{number:02d}"
        sub.mkdir(exist_ok=True)

        def show(batch_hosts: dict[str, HostResult]) -> None:
            if on_update is not None:
                on_update({**results, **batch_hosts})

        played = run(spec, show, into=(run_id, sub))
        for host in batch:
            result = played.hosts.get(host) or HostResult(
                host=host, failed=1, reason="the play never reached this host"
            )
            results[host] = result
            (state.failed if broken_hosts({host: result}) else state.converged).append(host)
        state.save(run_dir)
    return InstallResult(
        run_id=run_id,
        run_dir=run_dir,
        elapsed_s=time.monotonic() - started,
        hosts=results,
        rollout=state,
        resumed_from=resumed_from,
    )
