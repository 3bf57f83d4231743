"""The one module that imports ansible_runner.

A ``RunSpec`` goes in, a ``PlayResult`` with one ``HostResult`` per host comes out.
Each run gets a fresh private data dir under a kept run directory
(``runs/<id>/``: runner artifacts with every job event, ``stdout``, ``results.json``)
because runs that share one leak env files into each other (LAB-NOTES).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import RunError


@dataclass(frozen=True)
class RunSpec:
    playbook: Path
    inventory: tuple[Path, ...]  # later sources override earlier ones
    label: str = "run"
    limit: str | None = None
    tags: tuple[str, ...] = ()
    forks: int = 10
    check: bool = False
    diff: bool = False
    extravars: dict[str, Any] = field(default_factory=dict)


@dataclass
class HostResult:
    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False
    task: str = ""
    reason: str | None = None
    failed_task: str | None = None
    changes: list[str] = field(default_factory=list)
    pending: bool = False  # in a rollout that stopped before reaching it

    @property
    def status(self) -> str:
        if self.pending:
            return "pending"
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"


def broken_hosts(hosts: dict[str, HostResult]) -> list[str]:
    return [h for h, r in hosts.items() if r.status in ("failed", "unreachable")]


def hosts_doc(hosts: dict[str, HostResult]) -> dict[str, dict[str, Any]]:
    return {h: {**asdict(r), "status": r.status} for h, r in hosts.items()}


@dataclass
class PlayResult:
    run_id: str
    run_dir: Path
    rc: int
    status: str
    elapsed_s: float
    hosts: dict[str, HostResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "rc": self.rc,
            "status": self.status,
            "elapsed_s": round(self.elapsed_s, 2),
            "hosts": hosts_doc(self.hosts),
        }


def _reason(res: dict[str, Any]) -> str:
    """The most useful one-line reason Ansible gives for a failure."""
    for key in ("msg", "stderr", "module_stderr", "stdout"):
        value = res.get(key)
        if value:
            text = str(value).strip().splitlines()
            if text:
                return text[-1] if key != "msg" else " ".join(text)[:500]
    return "failed (no message)"


# What ansible's command action answers in check mode for a command it did not run.
WOULD_RUN = "Command would have run if not in check mode"


def would_change(task: str, res: dict[str, Any]) -> bool:
    """A PATCH task's command skipped only because of check mode: a real run would run it,
    and a PATCH command runs only to change something (the roles' task-name convention),
    so --check counts it as a change instead of a skip."""
    return "| PATCH |" in task and res.get("msg") == WOULD_RUN


class EventFolder:
    """Folds ansible-runner job events into per-host results as they arrive."""

    def __init__(self, on_update: Callable[[dict[str, HostResult]], None] | None = None):
        self.hosts: dict[str, HostResult] = {}
        self.on_update = on_update
        self.stats_seen = False
        self.would_run: dict[str, int] = {}  # per host: commands check mode skipped
        self._would_run_items: set[tuple[str, str]] = set()  # (host, task) of loop items

    def _host(self, name: str) -> HostResult:
        return self.hosts.setdefault(name, HostResult(host=name))

    def __call__(self, event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        kind = event.get("event", "")
        host = data.get("host")
        if host:
            result = self._host(host)
            task = data.get("task", "")
            res = data.get("res", {}) or {}
            if kind == "runner_on_start":
                result.task = task
            elif kind == "runner_on_ok":
                result.ok += 1
                if res.get("changed"):
                    result.changed += 1
                    result.changes.append(task)
            elif kind == "runner_item_on_skipped" and would_change(task, res):
                # A loop task reports per item; its final skip event carries no result.
                self._would_run_items.add((host, data.get("task_uuid", task)))
            elif kind == "runner_on_skipped" and (
                would_change(task, res)
                or (host, data.get("task_uuid", task)) in self._would_run_items
            ):
                result.changed += 1
                result.changes.append(task)
                self.would_run[host] = self.would_run.get(host, 0) + 1
            elif kind == "runner_on_skipped":
                result.skipped += 1
            elif kind == "runner_on_failed" and not data.get("ignore_errors"):
                result.failed += 1
                result.failed_task = task
                result.reason = _reason(res)
            elif kind == "runner_on_unreachable":
                result.unreachable = True
                result.failed_task = task
                result.reason = _reason(res)
        elif kind == "playbook_on_stats":
            self.stats_seen = True
            self._fold_stats(data)
        if self.on_update is not None and (host or kind == "playbook_on_stats"):
            self.on_update(self.hosts)
        return True  # returning False would drop the event from the artifacts (and the stats)

    def _fold_stats(self, stats: dict[str, Any]) -> None:
        """The final stats are authoritative for the counters."""
        for key, attr in (
            ("ok", "ok"),
            ("changed", "changed"),
            ("failures", "failed"),
            ("skipped", "skipped"),
        ):
            for host, count in (stats.get(key) or {}).items():
                setattr(self._host(host), attr, count)
        for host, count in self.would_run.items():  # ansible counted them as skipped
            result = self._host(host)
            result.changed = (stats.get("changed") or {}).get(host, 0) + count
            result.skipped = (stats.get("skipped") or {}).get(host, 0) - count
        for host in stats.get("dark") or {}:
            self._host(host).unreachable = True


def new_run_dir(label: str) -> tuple[str, Path]:
    run_id = time.strftime("%Y%m%dT%H%M%S") + f"-{label}-" + uuid.uuid4().hex[:6]
    run_dir = paths.runs_dir() / run_id
    run_dir.mkdir(parents=True)
    return run_id, run_dir


def close_ssh_masters(control_dir: Path) -> None:
    """Ask every SSH master of a finished run to exit (`ssh -O exit`)."""
    if not control_dir.is_dir():
        return
    for sock in control_dir.iterdir():
        subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "gpuboot-run"],
            capture_output=True,
            timeout=10,
            check=False,
        )


def ansible_env(run_dir: Path) -> dict[str, str]:
    return {
        "PATH": paths.put_venv_on_path(),
        "ANSIBLE_ROLES_PATH": str(paths.PROJECT_DIR / "roles"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",  # one SSH exec per task, no temp-file copy
        "ANSIBLE_GATHERING": "explicit",  # plays ask for the facts they need
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_LOCAL_TEMP": str(run_dir / "tmp"),
        # One SSH master per host for the whole play, in this run's own directory so
        # close_ssh_masters() can end them: a CLI run leaves no process behind.
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=300s",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(run_dir / "cp"),
        "ANSIBLE_TIMEOUT": "20",
    }


def run(
    spec: RunSpec,
    on_update: Callable[[dict[str, HostResult]], None] | None = None,
    into: tuple[str, Path] | None = None,  # (run id, run dir) made by the caller
) -> PlayResult:
    """Run one playbook; host failures are results, only a broken run raises."""
    import ansible_runner  # heavy: imported only when a play actually runs

    run_id, run_dir = into or new_run_dir(spec.label)
    private = run_dir / "private"
    private.mkdir()
    cmdline = []
    if spec.check:
        cmdline.append("--check")
    if spec.diff:
        cmdline.append("--diff")
    folder = EventFolder(on_update)
    env = ansible_env(run_dir)
    started = time.monotonic()
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private),
            artifact_dir=str(run_dir / "artifacts"),
            ident="job",
            playbook=str(spec.playbook),
            inventory=[str(p) for p in spec.inventory],
            limit=spec.limit,
            tags=",".join(spec.tags) or None,
            forks=spec.forks,
            cmdline=" ".join(cmdline) or None,
            extravars=spec.extravars or None,
            envvars=env,
            event_handler=folder,
            quiet=True,
            settings={"suppress_ansible_output": True},
        )
    except Exception as exc:  # runner's own failures (bad paths, missing binaries)
        raise RunError(f"ansible-runner could not start: {exc}", where=str(run_dir)) from exc
    finally:
        close_ssh_masters(run_dir / "cp")
    elapsed = time.monotonic() - started
    result = PlayResult(
        run_id=run_id,
        run_dir=run_dir,
        rc=runner.rc,
        status=runner.status,
        elapsed_s=elapsed,
        hosts=folder.hosts,
    )
    stdout = run_dir / "artifacts" / "job" / "stdout"
    if stdout.exists():
        (run_dir / "stdout").symlink_to(stdout.relative_to(run_dir))
    (run_dir / "results.json").write_text(json.dumps(result.to_dict(), indent=2))
    # Without the final stats the play never finished (syntax error, bad option, crash):
    # that is a broken run, not a verdict on any host.
    if not folder.stats_seen:
        tail = stdout.read_text()[-1500:] if stdout.exists() else ""
        raise RunError(
            f"ansible-playbook broke (status {runner.status}, rc {runner.rc}): "
            f"{tail.strip().splitlines()[-1] if tail.strip() else 'no output'}",
            where=str(run_dir),
            hint=f"full output in {run_dir}/stdout",
        )
    return result
