"""The one module that imports ansible_runner.

A ``RunSpec`` goes in, a ``PlayResult`` with one ``HostResult`` per host comes out.
Each run gets a fresh private data dir under a kept run directory
(``runs/<id>/``: runner artifacts with every job event, ``stdout``, ``results.json``)
because runs that share one leak env files into each other (LAB-NOTES).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuboot import locks, paths
from gpuboot.errors import BadInput, RunError
from gpuboot.sshopts import SSH_CONTROL_PATH_MAX


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
    strategy: str = "linear"  # STRATEGIES


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
    interrupted: bool = False  # its play was stopped (Ctrl-C, SIGTERM) before its end
    # its executor was lost before the host finished: neither ok nor failed (never broken)
    unknown: bool = False
    executor: str = "controller"  # who ran it: an executor's name, or the controller

    @property
    def status(self) -> str:
        if self.pending:
            return "pending"
        if self.interrupted:
            return "interrupted"
        if self.unknown:
            return "unknown"
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


# ansible's final stats counters, by the HostResult field each sets
STAT_KEYS = {"ok": "ok", "changed": "changed", "failures": "failed", "skipped": "skipped"}


class EventFolder:
    """Folds ansible-runner job events into per-host results as they arrive; ``on_event``
    (progress) sees each event once it is folded, with the hosts' results."""

    def __init__(
        self,
        on_update: Callable[[dict[str, HostResult]], None] | None = None,
        on_event: Callable[[dict[str, Any], dict[str, HostResult]], None] | None = None,
    ):
        self.hosts: dict[str, HostResult] = {}
        self.on_update = on_update
        self.on_event = on_event
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
            if kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
                # the last task that ran: ansible announces a task (runner_on_start)
                # before deciding to skip it
                result.task = task
            if kind == "runner_on_ok":
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
        if self.on_event is not None:
            self.on_event(event, self.hosts)
        if self.on_update is not None and (host or kind == "playbook_on_stats"):
            self.on_update(self.hosts)
        return True  # returning False would drop the event from the artifacts (and the stats)

    def _fold_stats(self, stats: dict[str, Any]) -> None:
        """The final stats are authoritative for the counters. A host absent from a
        counter has none: a failure a rescue block took is in "rescued", not "failures"."""
        dark = stats.get("dark") or {}
        for host in {h for key in STAT_KEYS for h in stats.get(key) or {}}:
            result = self._host(host)
            for key, attr in STAT_KEYS.items():
                setattr(result, attr, (stats.get(key) or {}).get(host, 0))
            if not result.failed and host not in dark:
                result.failed_task = result.reason = None
        for host, count in self.would_run.items():  # ansible counted them as skipped
            result = self._host(host)
            result.changed = (stats.get("changed") or {}).get(host, 0) + count
            result.skipped = (stats.get("skipped") or {}).get(host, 0) - count
        for host in dark:
            self._host(host).unreachable = True


def new_run_dir(label: str) -> tuple[str, Path]:
    """A fresh run directory, private to the operator (it will hold host data)."""
    run_id = time.strftime("%Y%m%dT%H%M%S") + f"-{label}-" + uuid.uuid4().hex[:6]
    runs = paths.runs_dir()
    hint = "set GPUBOOT_RUNS (or GPUBOOT_HOME) to a writable directory with free space"
    if not runs.exists():
        paths.private_dir(runs, hint=hint)
    run_dir = paths.private_dir(runs / run_id, hint=hint)
    locks.note_run(run_id)  # the hosts this process holds now name their run
    return run_id, run_dir


# A failure reason is one line of at most this many characters: an unreachable node's
# findings each carry it, and testinfra's ssh error would carry the whole command.
REASON_MAX = 300
# ssh's chatter around the line that says what went wrong
_SSH_CHATTER = ("Warning: Permanently added", "** ")


def last_line(text: str) -> str:
    """The last meaningful line of a tool's output, shortened to REASON_MAX."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line and not line.startswith(_SSH_CHATTER):
            return _shorten(line)
    return ""


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def failure_reason(exc: BaseException) -> str:
    """One short line for a failed remote command. testinfra's ssh backend raises
    ``RuntimeError(CommandResult)`` when ssh itself fails (exit 255), whose text is the
    whole command (certify's: the 6 KB collection script): say what ssh said instead."""
    result = exc.args[0] if exc.args else None
    if hasattr(result, "exit_status") and hasattr(result, "stderr"):
        return last_line(result.stderr) or last_line(result.stdout) or f"exit {result.rc}"
    return _shorten(str(exc)) or type(exc).__name__


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def _ssh_control(sock: Path, command: str) -> subprocess.CompletedProcess | None:
    """``ssh -O command`` against one ControlMaster socket; None when ssh could not answer."""
    try:
        return subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", command, "gpuboot-run"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError):
        return None


# Ansible's ControlPath for a host (ansible.plugins.connection.ssh since 2.3): its control
# directory, a slash and 10 hex digits of a hash of host, port and user.
ANSIBLE_CONTROL_NAME = len("/") + 10
# Where a run whose own directory is too deep for its sockets keeps them instead: a fixed
# place, so every process that asks about the run (a later one too) names the same one.
SHORT_CONTROL_BASE = Path("/tmp")


def _sockets_fit(directory: str) -> bool:
    return len(os.fsencode(directory)) + ANSIBLE_CONTROL_NAME <= SSH_CONTROL_PATH_MAX


def control_dir(run_dir: Path, short: Path | None = None) -> Path:
    """The directory of a run's ssh masters (ANSIBLE_SSH_CONTROL_PATH_DIR), named, not made.

    ``<run_dir>/cp`` when the longest socket path ssh binds there fits in a Unix socket's;
    else ``short`` (a short private directory of the caller's that ends with the run: an
    executor job's temp) or, by default, a directory of this run alone in /tmp named after
    its run directory (``make_control_dir`` makes it, ``run`` removes it). RunError when
    that does not fit either."""
    own = run_dir / "cp"
    real = os.path.realpath(run_dir)  # Ansible resolves the directory it is given
    if _sockets_fit(os.path.join(real, "cp")):
        return own
    if short is None:
        digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:12]
        short = SHORT_CONTROL_BASE / f"gpuboot-{os.getuid()}-{digest}"
    if not _sockets_fit(os.path.realpath(short)):
        room = SSH_CONTROL_PATH_MAX - ANSIBLE_CONTROL_NAME - len("/cp")
        raise RunError(
            f"no directory for the run's ssh sockets: {own} and {short} are both too long "
            "for a Unix socket path",
            where=str(run_dir),
            hint=f"set GPUBOOT_RUNS to a shorter directory (a run's directory takes at most "
            f"{room} bytes; on an executor, its jobs directory or TMPDIR)",
        )
    return short


def make_control_dir(run_dir: Path) -> Path:
    """``control_dir(run_dir)``, a short one made private (0700) if need be and refused
    when something else holds its name: /tmp is shared, and whoever owns the directory of
    a run's sockets could stand in for its masters. Ansible makes ``<run_dir>/cp`` itself,
    inside the private run directory."""
    cp = control_dir(run_dir)
    if cp == run_dir / "cp":
        return cp
    hint = f"remove {cp} if it is yours, or set GPUBOOT_RUNS to a shorter directory"
    try:
        with contextlib.suppress(FileExistsError):
            cp.mkdir(mode=0o700)
        held = cp.lstat()  # a symlink is refused, not followed
    except OSError as exc:
        raise RunError(
            f"cannot make the run's ssh socket directory: {exc}", where=str(cp), hint=hint
        ) from exc
    if not stat.S_ISDIR(held.st_mode) or held.st_uid != os.getuid() or held.st_mode & 0o077:
        raise RunError(
            "the run's ssh socket directory is not a private directory of this user's "
            "(a symlink, another user's, or open to others)",
            where=str(cp),
            hint=hint,
        )
    return cp


def close_ssh_masters(control_dir: Path, grace_s: float = 2.0) -> None:
    """End every SSH master of a run: ask each to exit (`ssh -O exit`); one whose socket is
    still there after ``grace_s`` did not take the request (ssh reports success whatever
    the master did) and is ended by the pid it reports (`ssh -O check`). Never raises: it
    runs on every way out of a play, Ctrl-C included, and must try every socket."""
    try:
        socks = sorted(p for p in control_dir.iterdir() if _is_socket(p))
    except OSError:
        return
    for sock in socks:
        _ssh_control(sock, "exit")
    deadline = time.monotonic() + grace_s
    while any(_is_socket(s) for s in socks) and time.monotonic() < deadline:
        time.sleep(0.1)  # a master that exits removes its socket
    for sock in (s for s in socks if _is_socket(s)):
        check = _ssh_control(sock, "check")
        found = re.search(r"\(pid=(\d+)\)", check.stderr) if check is not None else None
        if found:
            with contextlib.suppress(OSError):
                os.kill(int(found.group(1)), signal.SIGTERM)


def _play_processes(marker: bytes) -> list[int]:
    """The processes of one play, found by a variable only its environment carries."""
    found = []
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:  # no procfs: nothing to sweep
        return found
    for pid in entries:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if int(pid) != os.getpid() and marker in environ.split(b"\0"):
            found.append(int(pid))
    return found


def end_play_processes(run_dir: Path, grace_s: float = 5.0) -> list[int]:
    """End whatever of a play is still running; the pids that had to be ended.

    ansible-runner's cancel SIGKILLs ansible-playbook's process group only, but each of
    ansible's workers runs in a session of its own (setsid) with its ssh clients: they
    outlive it, and so would a master that did not exit. Everything a play started
    inherits its environment, where ANSIBLE_SSH_CONTROL_PATH_DIR names this run alone:
    SIGTERM (a worker then ends its own process group), SIGKILL what remains."""
    marker = f"ANSIBLE_SSH_CONTROL_PATH_DIR={control_dir(run_dir)}".encode()
    ended: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _play_processes(marker)
        if not pids:
            break
        ended += [p for p in pids if p not in ended]
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while _play_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
    return ended


@contextlib.contextmanager
def _cancel_on_signal() -> Iterator[Callable[[], bool]]:
    """While a play runs, Ctrl-C (SIGINT) or SIGTERM asks ansible-runner to cancel: it
    kills ansible-playbook's process group, which runs in a session of its own (a pty) and
    would outlive a KeyboardInterrupt unwinding past it. Left to itself, runner installs
    such a handler for good, and every later Ctrl-C of the process is swallowed."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop.is_set  # only the main thread receives signals
        return
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop.is_set
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


# How the controller drives the play: Ansible's own linear strategy, or mitogen's (a
# maintained project: one persistent interpreter per node instead of a fresh module
# process per task; `pip install 'gpuboot[fast]'`).
STRATEGIES = ("linear", "mitogen")


def strategy_env(strategy: str) -> dict[str, str]:
    """The Ansible settings for ``strategy``; BadInput when it is unknown or not installed."""
    if strategy not in STRATEGIES:
        raise BadInput(
            f"unknown strategy {strategy!r}",
            where="--strategy",
            hint=f"use one of: {', '.join(STRATEGIES)}",
        )
    if strategy == "linear":
        return {}
    try:
        import ansible_mitogen
    except ImportError:
        raise BadInput(
            "--strategy mitogen needs mitogen, which is not installed",
            where="--strategy",
            hint="pip install 'gpuboot[fast]', or leave --strategy out",
        ) from None
    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": "mitogen_linear"}


EVENT_RES_MAX = 24 * 1024 * 1024  # characters of one task result in an event


def ansible_env(
    run_dir: Path, strategy: str = "linear", short: Path | None = None
) -> dict[str, str]:
    """gpuboot's Ansible settings for a play whose files go in ``run_dir`` (``short``: see
    control_dir)."""
    return {
        **strategy_env(strategy),
        "PATH": paths.put_venv_on_path(),
        "ANSIBLE_ROLES_PATH": str(paths.ROLES_DIR),
        "ANSIBLE_COLLECTIONS_PATH": str(paths.COLLECTIONS_DIR),  # gpuboot.node's modules
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",  # one SSH exec per task, no temp-file copy
        "ANSIBLE_GATHERING": "explicit",  # plays ask for the facts they need
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_LOCAL_TEMP": str(run_dir / "tmp"),
        # One SSH master per host for the whole play, in a directory of this run's own
        # (control_dir) so close_ssh_masters() can end them: a CLI run leaves no process.
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=300s",
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir(run_dir, short)),
        "ANSIBLE_TIMEOUT": "20",
        # ansible-runner's callback empties a task result past 700,000 characters: an
        # executor's collection answer (a node's probe outputs, gzipped, base64) can be
        # larger, and would arrive as nothing. Kept under the stream's own line cap
        # (gpuboot.executor.wire).
        "MAX_EVENT_RES": str(EVENT_RES_MAX),
    }


# Ansible's strategy polls its workers for results every internal_poll_interval seconds
# (default 1 ms: ~2% of a core for as long as the play runs, on the controller's CPU). A
# play's pace is its tasks' round trips, so 5 ms costs at most 5 ms per task. Only an
# ansible.cfg can set it (no environment variable): a run writes one of its own, unless
# the operator's configuration applies (ANSIBLE_CONFIG, ~/.ansible.cfg, /etc/ansible).
ANSIBLE_CFG = "[defaults]\ninternal_poll_interval = 0.005\n"
OPERATOR_CFGS = ("~/.ansible.cfg", "/etc/ansible/ansible.cfg")


def config_env(run_dir: Path) -> dict[str, str]:
    """ANSIBLE_CONFIG naming the run's own ansible.cfg, or nothing when the operator has one."""
    if os.environ.get("ANSIBLE_CONFIG") or any(
        Path(p).expanduser().is_file() for p in OPERATOR_CFGS
    ):
        return {}
    cfg = run_dir / "ansible.cfg"
    paths.write_private(cfg, ANSIBLE_CFG)
    return {"ANSIBLE_CONFIG": str(cfg)}


def run(
    spec: RunSpec,
    on_update: Callable[[dict[str, HostResult]], None] | None = None,
    into: tuple[str, Path] | None = None,  # (run id, run dir) made by the caller
    on_event: Callable[[dict[str, Any], dict[str, HostResult]], None] | None = None,
) -> PlayResult:
    """Run one playbook; host failures are results, only a broken run raises."""
    import ansible_runner  # heavy: imported only when a play actually runs

    run_id, run_dir = into or new_run_dir(spec.label)
    private = run_dir / "private"
    paths.private_dir(private)
    cmdline = []
    if spec.check:
        cmdline.append("--check")
    if spec.diff:
        cmdline.append("--diff")
    folder = EventFolder(on_update, on_event)
    cp = make_control_dir(run_dir)
    env = {**ansible_env(run_dir, spec.strategy), **config_env(run_dir)}
    started = time.monotonic()
    with _cancel_on_signal() as cancelled:
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
                cancel_callback=cancelled,
                quiet=True,
                settings={"suppress_ansible_output": True},
            )
        except Exception as exc:  # runner's own failures (bad paths, missing binaries)
            raise RunError(f"ansible-runner could not start: {exc}", where=str(run_dir)) from exc
        finally:  # inside the handler: a second Ctrl-C cannot cut the cleanup short
            close_ssh_masters(cp)
            end_play_processes(run_dir)
            if cp != run_dir / "cp":  # a short one of its own, outside the run directory
                shutil.rmtree(cp, ignore_errors=True)
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
    if cancelled() and not folder.stats_seen:
        # a stopped play's hosts are not known to be ok: only a failure seen is a result
        for host in folder.hosts.values():
            host.interrupted = not (host.failed or host.unreachable)
    paths.write_private(run_dir / "results.json", json.dumps(result.to_dict(), indent=2))
    if cancelled():
        raise KeyboardInterrupt(f"the play was stopped (ansible-playbook ended); see {run_dir}")
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
