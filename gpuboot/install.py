"""`gpuboot install`: validate, then converge the inventory with the install playbook."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from gpuboot import paths
from gpuboot.inventory import Inventory, load_inventory
from gpuboot.runner import HostResult, PlayResult, RunSpec, new_run_dir, run

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


def install(
    inventory: str,
    *,
    limit: str | None = None,
    tags: tuple[str, ...] = (),
    forks: int = 10,
    check: bool = False,
    diff: bool = False,
    on_update: Callable[[dict[str, HostResult]], None] | None = None,
) -> PlayResult:
    inv = load_inventory(inventory)  # refuses bad input before any host is contacted
    run_id, run_dir = new_run_dir("install")
    overlay = stack_overlay(inv, run_dir)
    spec = RunSpec(
        playbook=PLAYBOOK,
        inventory=(inv.path, overlay) if overlay else (inv.path,),
        label="install",
        limit=limit,
        tags=tags,
        forks=forks,
        check=check,
        diff=diff,
    )
    return run(spec, on_update, into=(run_id, run_dir))
