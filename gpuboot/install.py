"""`gpuboot install`: validate, then converge the inventory with the install playbook."""

from __future__ import annotations

from collections.abc import Callable

from gpuboot import paths
from gpuboot.inventory import load_inventory
from gpuboot.runner import HostResult, PlayResult, RunSpec, run

PLAYBOOK = paths.PROJECT_DIR / "playbooks" / "install.yml"


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
    spec = RunSpec(
        playbook=PLAYBOOK,
        inventory=inv.path,
        label="install",
        limit=limit,
        tags=tags,
        forks=forks,
        check=check,
        diff=diff,
    )
    return run(spec, on_update)
