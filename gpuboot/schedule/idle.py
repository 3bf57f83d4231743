"""Whether another gpuboot run holds a scan's hosts right now: the scheduled service's
ExecCondition (gpuboot.schedule.systemd), so a scan that would be refused is skipped
instead of failing the unit."""

from __future__ import annotations

from gpuboot.errors import BadInput, GpubootError


def holder(inventory: str, limit: str | None) -> str | None:
    """Who holds one of the hosts (gpuboot.locks' message), or None. Anything else that
    stops the check (a broken inventory) is None too: the scan then runs, and refuses
    with its own message and exit code, which fails the unit as it should."""
    from gpuboot.inventory import load_inventory
    from gpuboot.locks import hold_inventory

    try:
        inv = load_inventory(inventory)
        held = hold_inventory(inv, limit, "schedule --idle-check")
    except GpubootError:
        return None
    try:
        with held:  # taken and given back at once: the scan takes them next
            return None
    except BadInput as exc:  # locks.hold refuses a held host with BadInput
        return f"{exc.where}: {exc.message}" if exc.where else exc.message
    except GpubootError:
        return None
