"""`gpuboot install`: validate, then converge the inventory with the install playbook."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuboot import diffview, locks, paths
from gpuboot.errors import BadInput
from gpuboot.executor import route, shards
from gpuboot.executor.batch import play_batch
from gpuboot.executor.reattach import carry_shard, reattach
from gpuboot.inventory import Inventory, load_inventory, select_hosts
from gpuboot.rollout import (
    RolloutState,
    Settings,
    batch_size,
    batches,
    check_resume_flags,
    failure_budget,
    resume_command,
    resume_from,
)
from gpuboot.runner import (
    HostResult,
    RunSpec,
    broken_hosts,
    hosts_doc,
    new_run_dir,
    run,
    strategy_env,
)

PLAYBOOK = paths.PLAYBOOKS_DIR / "install.yml"
# The play's last task for a host (the block's always, after the converged record): a host
# of a lost shard that reached it is done whatever the shard's end.
FINAL_TASK = "INST-006 | AUDIT | Give this node's lease back"
# Tags Ansible itself gives meaning to, whatever the playbook says.
SPECIAL_TAGS = ("all", "always", "never", "tagged", "untagged")


def known_tags() -> set[str]:
    """Every tag the shipped playbooks and roles use (what --tags may name): group tags,
    task ids and the certify rule ids tasks are tagged with (gpuboot.ids reads them)."""
    from gpuboot import ids

    return set(SPECIAL_TAGS) | ids.all_tags()


def check_tags(tags: tuple[str, ...]) -> None:
    """--tags naming no task would run nothing and report every host "ok": refused."""
    from gpuboot import ids

    known = known_tags()
    for tag in (t.strip() for arg in tags for t in arg.split(",")):
        if tag in known:
            continue
        if why := ids.JUDGED_ONLY.get(tag):  # a rule no role can make true
            raise BadInput(
                f"--tags {tag}: no task makes that rule true ({why})",
                where="--tags",
                hint="fix it by hand as the finding's action says, then certify again",
            )
        raise BadInput(
            f"--tags {tag!r} names no tag of the install playbook or its roles",
            where="--tags",
            hint="known tags: " + ", ".join(sorted(known)),
        )


def stack_overlay(inv: Inventory, run_dir: Path) -> Path | None:
    """An inventory layered after the operator's: the role variables gpuboot derives for
    each host (its stack's pins, its profile's RoCE rails).

    Stacks and profiles were resolved and checked in Python (gpuboot.inventory), so the roles
    receive plain, already-validated variables and never parse gpuboot's files.
    """
    if not any(view.role_vars for view in inv.views.values()):
        return None
    overlay = run_dir / "stack-vars.yml"
    # str(): ansible-core 2.19 hands out host names as a str subclass yaml cannot dump.
    hosts = {str(host): dict(view.role_vars) for host, view in inv.views.items()}
    paths.write_private(
        overlay,
        "# Written by gpuboot install: role variables derived from each host's stack and profile.\n"
        + yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=True),
    )
    return overlay


def ansible_code() -> list[Path]:
    """The files that decide what a converge does: playbooks, roles and the modules they
    call (bytecode caches are the interpreter's, not ours)."""
    return [
        path
        for base in (paths.PLAYBOOKS_DIR, paths.ROLES_DIR, paths.COLLECTIONS_DIR)
        for path in sorted(base.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    ]


def desired_digests(inv: Inventory, hosts: list[str]) -> dict[str, str]:
    """Per host, a digest of everything that decides its desired state: its variables
    (stack pins included) and the playbook and role code. The gpuboot_converged role
    skips a node only when this matches the digest recorded at its last converge."""
    code = hashlib.sha256()
    for path in ansible_code():
        code.update(str(path.relative_to(paths.ANSIBLE_DIR)).encode() + b"\0")
        code.update(path.read_bytes())
    digests = {}
    for host in hosts:
        host_vars = json.dumps(inv.resolved(host), sort_keys=True, default=str)
        digests[host] = hashlib.sha256(code.digest() + host_vars.encode()).hexdigest()[:32]
    return digests


@dataclass(frozen=True)
class Drain:
    """Cordon and drain cluster members before their stack changes (opt-in)."""

    kubeconfig: str
    context: str | None = None
    timeout_s: float = 600
    limits: Any = None  # gpuboot.k8s.budget.Limits (None: its defaults); the k8s extra is lazy


@dataclass
class InstallResult:
    """Every batch's hosts folded into one result, plus the rollout's own record."""

    run_id: str
    run_dir: Path
    elapsed_s: float
    hosts: dict[str, HostResult]
    rollout: RolloutState
    resumed_from: str | None = None
    drained: dict[str, Any] = field(default_factory=dict)  # host -> DrainResult
    would_drain: list[str] = field(default_factory=list)  # --check: hosts whose stack changes
    diff: list[dict[str, Any]] | None = None  # --diff: hosts grouped by change set (diffview)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "elapsed_s": round(self.elapsed_s, 2),
            "hosts": hosts_doc(self.hosts),
            "rollout": self.rollout.to_dict(),
            "resumed_from": self.resumed_from,
            "k8s_drain": [d.to_dict() for d in self.drained.values()],
            "would_drain": self.would_drain,
            **({"diff": diffview.groups_doc(self.diff)} if self.diff is not None else {}),
        }


def read_stack_changes(inv: Inventory, hosts: list[str]) -> tuple[list[str], dict[str, str]]:
    """Hosts whose packages `gpuboot plan` says will change (or that it could not read on
    their own account): the ones a cluster must let go before install touches them; and,
    apart, the hosts whose executor was lost before their read (host -> reason): unknown,
    so neither drained nor installed. One round trip per host, planned from the inventory
    install already loaded."""
    from gpuboot.plan import plan_hosts

    nodes = plan_hosts(inv, hosts)["nodes"]
    unknown = {str(n["host"]): str(n.get("error")) for n in nodes if n.get("unknown")}
    changing = [
        str(n["host"])
        for n in nodes
        if str(n["host"]) not in unknown and (n.get("error") or n.get("changes"))
    ]
    return changing, unknown


def stack_changes(inv: Inventory, hosts: list[str]) -> list[str]:
    """The hosts a cluster must let go before install touches them (read_stack_changes)."""
    return read_stack_changes(inv, hosts)[0]


def _drain_batch(
    inv: Inventory, batch: list[str], drain: Drain, result: InstallResult
) -> list[str]:
    """Drain the batch's changing cluster members; the hosts still to install."""
    from gpuboot.k8s.drain import drain as drain_nodes

    changing, unknown = read_stack_changes(inv, batch)
    for host, reason in unknown.items():  # unknown never counts as bad: not failed, not drained
        result.hosts[host] = HostResult(
            host=host,
            unknown=True,
            reason=f"{reason}; once it is back: {resume_command(inv.path, result.run_id)}",
        )
        result.rollout.unknown.append(host)
    batch = [h for h in batch if h not in unknown]
    if not changing:
        return batch
    drained = drain_nodes(
        changing,
        kubeconfig=drain.kubeconfig,
        context=drain.context,
        node_names=inv.k8s_node_names(),
        timeout_s=drain.timeout_s,
        limits=drain.limits,
    )
    result.drained.update(drained)
    for host, outcome in drained.items():
        if outcome.held:  # not touched: it stays pending, and --resume installs it later
            result.hosts[host] = HostResult(
                host=host,
                pending=True,
                reason=f"{outcome.node}: {outcome.held}; re-run when nodes are back: "
                f"gpuboot install -i {inv.path} --resume {result.run_id}",
            )
        elif outcome.error:
            result.hosts[host] = HostResult(
                host=host,
                failed=1,
                failed_task="K8S-DRAIN | cordon and drain the node before its stack changes",
                reason=f"{outcome.node}: {outcome.error}",
            )
            result.rollout.failed.append(host)
    return [h for h in batch if not (h in drained and (drained[h].error or drained[h].held))]


def install(
    inventory: str,
    *,
    limit: str | None = None,
    tags: tuple[str, ...] = (),
    forks: int = 10,
    strategy: str = "linear",
    check: bool = False,
    diff: bool = False,
    serial: str | None = None,
    max_fail: str | None = None,
    resume: str | None = None,
    allow_reboot: bool = False,
    full: bool = False,
    drain: Drain | None = None,
    on_update: Callable[[dict[str, HostResult]], None] | None = None,
    warn: Callable[[str], None] = lambda _m: None,
    progress: Any = None,  # gpuboot.progress.InstallProgress: told each batch and event
) -> InstallResult:
    """Converge the inventory batch by batch; stop once more hosts failed than the budget.

    Bad input (inventory, stack, --serial/--max-fail, the run to resume) is refused before
    any host is contacted. Without --serial the whole selection is one batch. A node
    that has not drifted since its last converge skips the roles, unless ``full``. With
    ``drain``, each batch's cluster members whose stack changes are cordoned and drained
    first (a node that cannot be drained fails and is not touched); they stay cordoned
    until `gpuboot certify --kubeconfig` passes them. A real (not --check) run holds its
    hosts' machine locks (gpuboot.locks) throughout: a second run on them is refused.
    Ctrl-C ends the play; rollout.json keeps what finished and --resume does the rest.
    """
    check_tags(tags)
    strategy_env(strategy)  # unknown or not installed: refused before any host
    if forks < 1:
        raise BadInput(
            f"--forks {forks} must be at least 1", where="--forks", hint="e.g. --forks 10"
        )
    inv = load_inventory(inventory)  # refuses bad input before any host is contacted
    given = Settings(
        limit=limit,
        tags=tags,
        serial=serial,
        max_fail=max_fail,
        allow_reboot=allow_reboot,
        full=full,
        kubeconfig=drain.kubeconfig if drain else None,
        k8s_context=drain.context if drain else None,
        drain_timeout=drain.timeout_s if drain else None,
    )
    hosts = select_hosts(inv, limit)
    resumed_from = None
    size = batch_size(serial, max(len(hosts), 1))
    budget = failure_budget(max_fail, len(hosts))
    settings = given
    if resume:
        # the stopped rollout goes on as it was asked: its batch size, budget and tags
        found = resume_from(inv.path, resume, warn=warn)
        check_resume_flags(found, given)
        resumed_from, settings = found.run_id, found.settings
        hosts = [h for h in hosts if h in found.hosts]
        hosts.sort(key=found.hosts.index)
        size = found.batch_size or max(len(hosts), 1)
        budget = found.budget
        tags = settings.tags
        allow_reboot = allow_reboot or settings.allow_reboot
        full = full or settings.full
        if drain is None and settings.kubeconfig:
            drain = Drain(settings.kubeconfig, settings.k8s_context, settings.drain_timeout or 600)
            warn(f"resuming with the recorded drain: --kubeconfig {settings.kubeconfig}")
        check_tags(tags)  # a hand-edited record is input too
    if drain is not None:
        from gpuboot.k8s.gate import connect

        connect(drain.kubeconfig, drain.context)  # an unusable kubeconfig is bad input too
    # the executors of the hosts' domains, asked their versions before any host: a skewed
    # one is bad input; one that does not answer leaves its hosts unknown, the rest go on
    answers = route.preflight(inv, route.candidates(inv, hosts))
    fleet = Fleet(
        answered={n for n, why in answers.items() if why is None},
        unanswered={n: why for n, why in answers.items() if why is not None},
    )
    if resumed_from:  # what a lost shard finished into its executor's spool is read, not re-run
        found = reattach(inv, paths.runs_dir() / resumed_from, fleet.answered)
        fleet.recovered = {
            h: r for h, r in found.done.items() if h in hosts and r.status in ("ok", "changed")
        }
        fleet.running = {h: r for h, r in found.running.items() if h in hosts}
        fleet.carried = found.carried
        hosts = [h for h in hosts if h not in fleet.recovered and h not in fleet.running]
    state = RolloutState(
        inventory=str(inv.path.resolve()),
        hosts=[*fleet.recovered, *fleet.running, *hosts],
        converged=list(fleet.recovered),
        unknown=list(fleet.running),
        batch_size=size,
        budget=budget,
        check=check,
        settings=settings.to_dict(),
        resumed_from=resumed_from,
    )
    held = contextlib.nullcontext() if check else locks.hold_hosts(inv, hosts, "install")
    with held:
        return _roll_out(
            inv,
            state,
            tags=tags,
            forks=forks,
            strategy=strategy,
            check=check,
            diff=diff,
            allow_reboot=allow_reboot,
            full=full,
            drain=drain,
            on_update=on_update,
            resumed_from=resumed_from,
            progress=progress,
            fleet=fleet,
        )


@dataclass
class Fleet:
    """Who may run what: the executors that answered the pre-flight, why the others did
    not, the hosts a resume found done in a lost shard's spool, and those still running
    in a lost shard's live job (unknown, left alone) with the shards' dirs."""

    answered: set[str] = field(default_factory=set)
    unanswered: dict[str, str] = field(default_factory=dict)
    recovered: dict[str, HostResult] = field(default_factory=dict)
    running: dict[str, HostResult] = field(default_factory=dict)
    carried: list[Path] = field(default_factory=list)


def _shard_jobs(
    inv: Inventory,
    routes: dict[str, list[str]],
    fleet: Fleet,
    run_dir: Path,
    extravars: dict[str, Any],
    runner: dict[str, Any],
) -> dict[str, tuple[route.Executor, shards.ShardJob]]:
    """One install job per executor that answered, its hosts resolved on the controller."""
    jobs = {}
    for name, names in routes.items():
        if name == route.CONTROLLER or name in fleet.unanswered:
            continue
        digests = extravars["gpuboot_converged_digests"]
        job = shards.build_job(
            shards.shard_dir(run_dir, name),
            {h: inv.resolved(h) for h in names},
            PLAYBOOK.name,
            {**extravars, "gpuboot_converged_digests": {h: digests[h] for h in names}},
            runner=runner,
            final_task=FINAL_TASK,
            on_detach="finish",  # an install finishes into the spool when the controller goes
        )
        jobs[name] = (route.executor(inv, name), job)
    return jobs


def _roll_out(
    inv: Inventory,
    state: RolloutState,
    *,
    tags: tuple[str, ...],
    forks: int,
    strategy: str,
    check: bool,
    diff: bool,
    allow_reboot: bool,
    full: bool,
    drain: Drain | None,
    on_update: Callable[[dict[str, HostResult]], None] | None,
    resumed_from: str | None,
    progress: Any = None,
    fleet: Fleet | None = None,
) -> InstallResult:
    """The batches of a checked, locked install; rollout.json saved after each batch and
    when interrupted. Each batch's hosts run where their domain says (gpuboot.executor)."""
    fleet = fleet or Fleet()
    left = {**fleet.recovered, **fleet.running}
    hosts, size = [h for h in state.hosts if h not in left], state.batch_size
    started = time.monotonic()
    run_id, run_dir = new_run_dir("install")
    for where in fleet.carried:  # the next resume reads them from this run
        carry_shard(where, run_dir)
    overlay = stack_overlay(inv, run_dir)
    digests = desired_digests(inv, hosts)
    again = (
        Settings.from_record(state.settings).command(inv.path, check=True)
        if check
        else resume_command(inv.path, run_id)
    )
    for result in fleet.running.values():
        result.reason = f"{result.reason}; once it has ended: {again}"
    results: dict[str, HostResult] = {
        **left,
        **{h: HostResult(host=h, pending=True) for h in hosts},
    }
    extravars = {
        "gpuboot_allow_reboot": allow_reboot,
        "gpuboot_converged_digests": digests,
        "gpuboot_converged_trust": not full,
    }
    outcome = InstallResult(run_id, run_dir, 0.0, results, state, resumed_from)
    state.save(run_dir)
    try:
        for number, batch in enumerate(batches(hosts, size), start=1):
            if state.budget_spent:
                state.stopped = (
                    f"{len(state.failed)} host(s) failed, more than --max-fail allows "
                    f"({state.budget}); {len(state.pending)} host(s) not started"
                )
                break
            if drain is not None and check:
                outcome.would_drain += stack_changes(inv, batch)
            elif drain is not None:
                batch = _drain_batch(inv, batch, drain, outcome)
                if not batch:
                    state.save(run_dir)
                    continue
            sub = run_dir if size >= len(hosts) else run_dir / f"batch-{number:02d}"
            paths.private_dir(sub)

            def show(batch_hosts: dict[str, HostResult]) -> None:
                if on_update is not None:
                    on_update({**results, **batch_hosts})

            def on_controller(names: list[str], hook: Any, sub: Path = sub) -> Any:
                spec = RunSpec(
                    playbook=PLAYBOOK,
                    inventory=(inv.path, overlay) if overlay else (inv.path,),
                    label="install",
                    limit=",".join(names),
                    tags=tags,
                    forks=forks,
                    strategy=strategy,
                    check=check,
                    diff=diff,
                    extravars=extravars,
                )
                hooks = {"on_event": hook} if progress is not None else {}
                return run(spec, show, into=(run_id, sub), **hooks)

            if progress is not None:
                progress.batch(number, -(-len(hosts) // size), batch, len(hosts))
            routes = route.routing(inv, batch, fleet.answered)
            cmdline = [flag for flag, on in (("--check", check), ("--diff", diff)) if on]
            runner = {
                "forks": forks,
                "tags": ",".join(tags) or None,
                "cmdline": " ".join(cmdline) or None,
                "gpuboot": {"strategy": strategy},
            }
            jobs = _shard_jobs(inv, routes, fleet, run_dir, extravars, runner)
            found = play_batch(
                routes,
                controller=on_controller,
                jobs=jobs,
                unanswered=fleet.unanswered,
                run_dir=run_dir,
                results_dir=sub,
                hint=again,
                on_event=progress.event if progress is not None else None,
            )
            if diff:
                for _, job in jobs.values():
                    shards.keep_events(job.private_data_dir.parent)
            for host in batch:
                result = found[host]
                results[host] = result
                if result.unknown:
                    state.unknown.append(host)
                elif broken_hosts({host: result}):
                    state.failed.append(host)
                else:
                    state.converged.append(host)
            state.save(run_dir)
    except KeyboardInterrupt:
        # The interrupted batch's hosts stay pending: --resume redoes them.
        state.stopped = f"interrupted; {len(state.pending)} host(s) not finished"
        state.save(run_dir)
        raise KeyboardInterrupt(
            f"install stopped; {len(state.converged)} host(s) converged and "
            f"{len(state.failed)} failed are kept in {run_dir / 'rollout.json'}; to go on: " + again
        ) from None
    outcome.elapsed_s = time.monotonic() - started
    if diff:  # what changed (--check: would), per change set; the whole in diff.txt
        found = diffview.collect(run_dir)
        outcome.diff = diffview.group(found, [h for h, r in results.items() if not r.pending])
        diffview.write(run_dir, outcome.diff, check=check)
    return outcome
