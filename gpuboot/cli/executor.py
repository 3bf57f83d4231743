"""`gpuboot executor setup`: gpuboot's venv on the inventory's execution nodes (group
gpuboot_executors), made offline from a wheelhouse of the controller's own ansible-core,
ansible-runner and gpuboot, then checked the way every verb checks an executor before
using it: its supervisor must report the controller's versions."""

from __future__ import annotations

from typing import Any

from gpuboot.cli import options
from gpuboot.cli.outcome import Outcome, progress
from gpuboot.errors import EXIT_NODE_FAILED, EXIT_OK, BadInput, RunError

PLAYBOOK = "executor-setup.yml"


def register(verbs, common) -> None:
    ex = verbs.add_parser("executor", help="execution nodes that run each hall's hosts")
    ex_verbs = ex.add_subparsers(dest="executor_verb", required=True, parser_class=type(ex))
    setup = ex_verbs.add_parser(
        "setup",
        parents=[
            common,
            options.targets(
                required=True,
                inventory_help="the inventory whose group gpuboot_executors is set up",
                limit_help="executors to set up, a comma list of names (default: all of them)",
            ),
        ],
        help="install the controller's ansible-core, ansible-runner and gpuboot in a venv "
        "(gpuboot_executor_venv) on each executor, offline, and check its versions",
        epilog="exit codes: 0 every executor runs the controller's versions, 1 an executor "
        "failed, was unreachable or reports other versions, 2 bad input (no executors, "
        "an unknown name in --limit), 3 the run broke",
    )
    setup.set_defaults(func=run)


def _selected(inv, limit: str | None) -> list[str]:
    names = list(inv.executors)
    if not names:
        raise BadInput(
            "the inventory has no executors to set up",
            where=f"{inv.path}: group gpuboot_executors",
            hint="list the execution nodes in group gpuboot_executors, each with "
            "gpuboot_executor_domains: [hall-a]",
        )
    if not limit:
        return names
    asked = [n.strip() for n in limit.split(",") if n.strip()]
    unknown = [n for n in asked if n not in inv.executors]
    if unknown or not asked:
        raise BadInput(
            f"--limit {limit!r}: not an executor: {', '.join(unknown) or '(empty)'}",
            where=f"{inv.path}: group gpuboot_executors",
            hint=f"name executors of the inventory, e.g. --limit {names[0]}",
        )
    return list(dict.fromkeys(asked))


def _versions(inv, name: str) -> tuple[dict[str, str] | None, str | None]:
    """What the executor's supervisor reports, and why it differs from the controller's."""
    from gpuboot.executor import versions
    from gpuboot.executor.route import executor

    try:
        remote = versions.remote_versions(executor(inv, name).command("versions"))
    except RunError as exc:
        return None, exc.message
    try:
        versions.check_skew(name, remote, versions.local_versions(), inv.path)
    except BadInput as exc:
        return remote, exc.message
    return remote, None


def run(args) -> Outcome:
    from gpuboot import paths, runner
    from gpuboot.executor import wheelhouse
    from gpuboot.executor.versions import local_versions
    from gpuboot.inventory import load_inventory

    inv = load_inventory(args.inventory)
    names = _selected(inv, args.limit)
    say = progress(args)
    house = wheelhouse.ensure(say)
    say(f"setting up {len(names)} executor(s) from wheelhouse {house.key}")
    spec = runner.RunSpec(
        playbook=paths.PLAYBOOKS_DIR / PLAYBOOK,
        inventory=(inv.path,),
        label="executor-setup",
        limit=",".join(names),
        extravars={
            "gpuboot_executor_wheelhouse": str(house.tar),
            "gpuboot_executor_wheelhouse_key": house.key,
            "gpuboot_executor_wheelhouse_python": house.python,
            "gpuboot_executor_wheelhouse_pip": house.pip,
            "gpuboot_executor_wheelhouse_wheels": ",".join(house.wheels),
            "gpuboot_executor_versions": local_versions(),
        },
    )
    result = runner.run(spec)
    executors: dict[str, dict[str, Any]] = {}
    for name in names:
        host = result.hosts.get(name)
        status = host.status if host else "unreachable"
        entry: dict[str, Any] = {
            "status": status,
            "venv": inv.executors[name].venv,
            "changes": list(host.changes) if host else [],
        }
        if host and host.reason:
            entry["reason"] = host.reason
        if status in ("ok", "changed"):
            entry["versions"], differ = _versions(inv, name)
            if differ:
                entry.update(status="failed", reason=differ)
        executors[name] = entry
    failed = [n for n, e in executors.items() if e["status"] not in ("ok", "changed")]
    doc = {
        "inventory": str(inv.path),
        "run_id": result.run_id,
        "run_dir": str(result.run_dir),
        "wheelhouse": {"key": house.key, "tar": str(house.tar), "wheels": list(house.wheels)},
        "executors": executors,
    }
    return Outcome(EXIT_NODE_FAILED if failed else EXIT_OK, doc, _text(executors, house, failed))


def _text(executors: dict[str, dict[str, Any]], house, failed: list[str]) -> str:
    from gpuboot.ui import table

    rows = [
        (
            name,
            e["status"],
            e["venv"],
            e.get("reason") or " ".join(f"{p} {v}" for p, v in (e.get("versions") or {}).items()),
        )
        for name, e in executors.items()
    ]
    lines = [table(("executor", "status", "venv", "versions / reason"), rows)]
    lines.append(f"wheelhouse {house.key}: {len(house.wheels)} wheels ({house.tar})")
    if failed:
        lines.append(f"not set up: {', '.join(failed)}")
    return "\n".join(lines)
