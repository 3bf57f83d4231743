"""The two node-side steps that are not an install: a GPU reset and a reboot, each a small
shipped play (every argument a list item or an extra var: no shell line is built from a
value) run from the controller, or for a host with a ``gpuboot_domain`` as a shard on its
domain's executor (gpuboot.executor.batch, as install's); a host whose executor was lost
or never answered is unknown, and the step held (``held``), never failed. The reboot is
the install's own gpuboot_reboot role, handed a reboot request the way the other roles
record theirs; its ansible.builtin.reboot waits for the boot time (or the inventory's
gpuboot_reboot_boot_time_command) to change and the role checks the request is gone and
the pinned driver loaded.

Each play takes the node's lease first (gpuboot.node.lease, the one install takes) and gives
it back in an always, so a second controller never converges a node remediation is
resetting or rebooting; a lease another controller holds fails the first task, before
anything changes, and the step is held, not failed (``refused`` reads it). On this
controller, the play holds the host's machine lock (gpuboot.locks, install's and
certify's) while it runs: an install or certify of the same node here refuses, and a
step that finds the node held by one is not done (bad input, held)."""

from __future__ import annotations

from typing import Any

from gpuboot import locks, paths
from gpuboot.executor import route, shards
from gpuboot.executor.batch import play_batch
from gpuboot.inventory import Inventory
from gpuboot.runner import HostResult, PlayResult, RunSpec, new_run_dir, run

# The tasks that take the node's lease: these plays' and install's (playbooks/install.yml).
LEASE_TASKS = ("REM-000 ", "REM-010 ", "INST-004 ")

# Daemons that hold every GPU open: a reset is refused while they run.
GPU_DAEMONS = ("nvidia-persistenced", "nvidia-dcgm")

# Shipped playbooks (gpuboot/ansible/playbooks): an executor runs only its own shipped ones.
RESET_PLAYBOOK = "remediate-reset.yml"
REBOOT_PLAYBOOK = "remediate-reboot.yml"
# Each play's last task: a host that reached it is done even if its executor is lost after.
FINAL_TASKS = {
    RESET_PLAYBOOK: "REM-009 | AUDIT | Give this node's lease back",
    REBOOT_PLAYBOOK: "REM-019 | AUDIT | Give this node's lease back",
}


def _play(inv: Inventory, host: str, playbook: str, extravars: dict) -> HostResult:
    """The play, with the host's machine lock held on this controller for its whole run (a
    lock held by another run here refuses it before its run dir exists)."""
    with locks.hold_hosts(inv, [host], "remediate"):
        return _played(inv, host, playbook, extravars)


def _played(inv: Inventory, host: str, playbook: str, extravars: dict) -> HostResult:
    """The play on ``host``, from the controller or, for a host with a gpuboot_domain, as a
    shard on its domain's executor (asked its versions first: a skewed one is bad input). A
    host its executor did not finish is unknown (HostResult.unknown), never failed."""
    label = playbook.removesuffix(".yml")
    run_id, run_dir = new_run_dir(label)
    answers = route.preflight(inv, route.candidates(inv, [host]))
    routes = route.routing(inv, [host], [n for n, why in answers.items() if why is None])
    unanswered = {n: why for n, why in answers.items() if why is not None}
    jobs = {
        name: (
            route.executor(inv, name),
            shards.build_job(
                shards.shard_dir(run_dir, name),
                {host: inv.resolved(host)},
                playbook,
                extravars,
                final_task=FINAL_TASKS[playbook],
                on_detach="finish",  # a reset or reboot half done is worse than one finished
            ),
        )
        for name in routes
        if name != route.CONTROLLER and name not in unanswered
    }

    def controller(hosts: list[str], on_event: Any) -> PlayResult:
        spec = RunSpec(
            playbook=paths.PLAYBOOKS_DIR / playbook,
            inventory=(inv.path,),
            label=label,
            limit=",".join(hosts),
            extravars=extravars,
        )
        return run(spec, into=(run_id, run_dir), on_event=on_event)

    return play_batch(
        routes,
        controller=controller,
        jobs=jobs,
        unanswered=unanswered,
        run_dir=run_dir,
        results_dir=run_dir,
        hint=f"gpuboot remediate -i {inv.path} --limit {host}",
    )[host]


def reset_gpus(inv: Inventory, host: str, gpus: tuple[str, ...]) -> HostResult:
    return _play(
        inv,
        host,
        RESET_PLAYBOOK,
        {"gpuboot_remediate_gpus": list(gpus), "gpuboot_remediate_daemons": list(GPU_DAEMONS)},
    )


def reboot(inv: Inventory, host: str, reason: str) -> HostResult:
    return _play(
        inv,
        host,
        REBOOT_PLAYBOOK,
        {"gpuboot_allow_reboot": True, "gpuboot_remediate_reason": reason[:200]},
    )


def held(played: HostResult) -> str | None:
    """Why the step is held rather than judged: the node's lease was not taken (nothing
    done), or the play's outcome is unknown because its executor was lost (what it did is
    not known: the ladder must not climb on it); None when the play's result stands."""
    if played.unknown:
        return f"outcome unknown: {played.reason}"
    if why := refused(played):
        return f"not touched: {why}"
    return None


def refused(played: HostResult) -> str | None:
    """Why the play left the node alone at its lease (another controller holds it, or the
    lease could not be read), None when it got past it: nothing was done on the node, so the
    step is held back, never a failure to climb on."""
    if played.status == "failed" and (played.failed_task or "").startswith(LEASE_TASKS):
        return played.reason or f"the node's lease was not taken ({played.failed_task})"
    return None
