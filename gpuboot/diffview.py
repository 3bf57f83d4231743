"""What an install with --diff changed (or, with --check, would change), read back from
the play's job events and grouped by identical change set across hosts.

One entry per task that changed something, counted the way the play counts (runner's
EventFolder: a changed task, or a PATCH command check mode did not run), so the
terminal's "N changes" is the real run's count. The terminal gets packages (from ->
to), files (unified diffs, truncated), QoS, MIG and the rest, one block per distinct
change set; the whole, untruncated, goes to ``diff.txt`` in the run directory.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot.errors import GpubootError
from gpuboot.report._util import host_key
from gpuboot.runner import would_change
from gpuboot.ui import host_ranges
from gpuboot.yamlsafe import loads_json_bounded, read_capped_bytes

FILE_NAME = "diff.txt"
DIFF_LINES = 12  # per file on the terminal; diff.txt has them all
LINE_WIDTH = 160
# runner writes each task result of each host as one event file: a node's diff or output
# larger than this is not read (nor is a FIFO or link planted among them)
EVENT_MAX_BYTES = 16 * 1024 * 1024
EVENT_HINT = "the run directory's job events are ansible-runner's: run the install again"
KINDS = (
    ("packages", "packages"),
    ("file", "files"),
    ("qos", "RoCE QoS"),
    ("mig", "MIG"),
    ("other", "services, kernel modules and the rest"),
)


@dataclass(frozen=True)
class Change:
    task: str  # the task's name, "<ID> | PATCH | text"
    kind: str  # one of KINDS
    lines: tuple[str, ...] = ()  # what changes, ready to print

    @property
    def task_id(self) -> str:
        return self.task.split(" | ")[0]


# ---------------------------------------------------------------- reading the events
def _events(run_dir: Path) -> list[dict[str, Any]]:
    """Every job event of the run, batch by batch, in the order they happened."""
    found = []
    for events in sorted(run_dir.glob("**/artifacts/job/job_events")):
        batch = []
        for path in events.glob("*.json"):
            try:
                # an event carries a node's output: read as a regular file within a cap
                data = read_capped_bytes(path, EVENT_MAX_BYTES, "job event", hint=EVENT_HINT)
                event = loads_json_bounded(data)
            except (GpubootError, ValueError):
                continue  # a half-written event of an interrupted run, or not one at all
            if isinstance(event, dict):
                batch.append(event)
        found += sorted(batch, key=lambda e: e.get("counter", 0))
    return found


def collect(run_dir: Path) -> dict[str, list[Change]]:
    """Per host, its changes in task order (from the run's job events)."""
    changes: dict[str, list[Change]] = {}
    items: dict[tuple[str, str], list[dict[str, Any]]] = {}  # check mode's skipped commands
    for event in _events(run_dir):
        data = event.get("event_data") or {}
        host, task, kind = data.get("host"), data.get("task", ""), event.get("event")
        if not host:
            continue
        res = data.get("res") or {}
        key = (host, data.get("task_uuid", task))
        if kind == "runner_item_on_skipped" and would_change(task, res):
            items.setdefault(key, []).append(res)
        elif kind == "runner_on_ok" and res.get("changed"):
            loop = [r for r in res.get("results") or [] if r.get("changed")]
            changes.setdefault(host, []).append(describe(task, data, res, loop))
        elif kind == "runner_on_skipped" and (would_change(task, res) or key in items):
            changes.setdefault(host, []).append(describe(task, data, res, items.get(key, [])))
    return changes


# ---------------------------------------------------------------- one change
def describe(task: str, data: dict[str, Any], res: dict[str, Any], loop: list) -> Change:
    action = str(data.get("resolved_action") or data.get("task_action") or "")
    role = data.get("role") or ""
    if action.endswith("pinned_packages"):
        return Change(task, "packages", _packages(res))
    if action.endswith("roce_qos"):
        return Change(task, "qos", _rails(res))
    if role == "nvidia_mig" and "stdout_lines" in res:
        return Change(task, "mig", tuple(res["stdout_lines"]) or ("layout changes",))
    diffs = [d for r in (loop or [res]) for d in _diff_list(r)]
    if diffs:
        args = (res.get("invocation") or {}).get("module_args") or {}
        return Change(task, "file", _files(diffs, args.get("dest") or args.get("path")))
    if action.endswith("gpuboot.node.service"):
        return Change(task, "other", (_unit(res),))
    if action.endswith("systemd_service") or action.endswith("systemd"):
        return Change(task, "other", (_service(res),))
    if action.endswith("kernel_module"):
        return Change(task, "other", (_module(res),))
    if loop or "cmd" in res:
        return Change(task, "other", tuple(_command(r) for r in (loop or [res])))
    return Change(task, "other")


def _diff_list(res: dict[str, Any]) -> list[dict[str, Any]]:
    diff = res.get("diff")
    if isinstance(diff, dict):
        return [diff]
    return [d for d in diff or [] if isinstance(d, dict)]


def _fit(line: str) -> str:
    return line if len(line) <= LINE_WIDTH else line[: LINE_WIDTH - 3] + "..."


def _versions(text: str) -> dict[str, str]:
    """pinned_packages' diff lines "name version held" -> {name: "version held"}."""
    found = {}
    for line in str(text or "").splitlines():
        name, _, rest = line.partition(" ")
        if name:
            found[name] = rest
    return found


def _packages(res: dict[str, Any]) -> tuple[str, ...]:
    """One line per package that changes, "name: from -> to" (pinned_packages' diff);
    without --diff, its lists of what it installs, removes and holds."""
    diffs = {d.get("before_header"): d for d in _diff_list(res)}
    lines = []
    if "packages" in diffs:
        before = _versions(diffs["packages"].get("before"))
        after = _versions(diffs["packages"].get("after"))
        for name in [*after, *(n for n in before if n not in after)]:
            was, will = before.get(name, "(not installed)"), after.get(name, "removed")
            if was != will:
                lines.append(f"{name}: {was} -> {will}")
    else:
        lines += [f"install {p}" for p in res.get("installed") or []]
        lines += [f"remove {p}" for p in res.get("removed") or []]
        lines += [f"hold {p}" for p in res.get("held") or []]
    if "module streams" in diffs:
        d = diffs["module streams"]
        lines.append(f"module stream: {d.get('before', '').strip() or '-'} -> {d['after'].strip()}")
    pin_file = next((h for h in diffs if str(h).startswith("/")), None)
    if res.get("pinned"):
        lines.append(f"pin file {pin_file} rewritten" if pin_file else "pins rewritten")
    return tuple(lines)


def _files(diffs: list[dict[str, Any]], dest: str | None) -> tuple[str, ...]:
    """A unified diff per file (new file: from /dev/null)."""
    lines: list[str] = []
    for d in diffs:
        path = dest or d.get("after_header") or d.get("before_header") or "(file)"
        if "prepared" in d:
            lines += str(d["prepared"]).splitlines()
            continue
        before, after = d.get("before"), d.get("after")
        if not isinstance(before, str) or not isinstance(after, str):  # state, mode...
            lines.append(f"{path}: {before!r} -> {after!r}")
            continue
        lines += difflib.unified_diff(
            before.splitlines(),
            after.splitlines(),
            fromfile=path if before else "/dev/null",
            tofile=path,
            lineterm="",
            n=1,
        )
    return tuple(lines)


def _service(res: dict[str, Any]) -> str:
    args = (res.get("invocation") or {}).get("module_args") or {}
    name = res.get("name") or args.get("name") or "unit"
    what = []
    if args.get("enabled") is not None:
        what.append("enable" if args["enabled"] else "disable")
    if args.get("state"):
        what.append({"started": "start", "stopped": "stop"}.get(args["state"], args["state"][:-2]))
    return f"{name}: {', '.join(what) or 'changes'}"


def _unit(res: dict[str, Any]) -> str:
    """gpuboot.node.service's answer: "openibd: enable, start" (what it did or would do)."""
    note = " (the unit comes with this run)" if res.get("unit_missing") else ""
    return f"{res.get('name') or 'unit'}: {', '.join(res.get('actions') or ()) or 'changes'}{note}"


def _module(res: dict[str, Any]) -> str:
    args = (res.get("invocation") or {}).get("module_args") or {}
    name = args.get("name") or "module"
    if res.get("action"):
        return f"{name}: {res['action']} {res.get('installed') or ''}".rstrip()
    if res.get("reboot_needed"):
        return f"{name}: reboot needed ({res.get('loaded') or 'not'} loaded)"
    return f"{name}: changes"


def _rails(res: dict[str, Any]) -> tuple[str, ...]:
    """roce_qos' rails that change, one line each, as read -> as wanted."""
    args = (res.get("invocation") or {}).get("module_args") or {}
    lines = []
    for dev, rail in sorted((res.get("rails") or {}).items()):
        parts = []
        if rail.get("set_qos"):
            had = rail.get("pfc_priorities")
            parts.append(f"trust {rail.get('trust') or 'unknown'} -> {args.get('trust', '?')}")
            parts.append(
                f"PFC priorities {_priorities(had)} -> {_priorities(args.get('pfc_priorities'))}"
            )
        if rail.get("enable_ecn"):
            parts.append("ECN on: " + ", ".join(rail["enable_ecn"]))
        if parts:
            lines.append(_fit(f"{dev}: " + "; ".join(parts)))
    return tuple(lines) or ("QoS changes",)


def _priorities(found: Any) -> str:
    if found is None:
        return "unknown"
    return ",".join(map(str, found)) or "none"


def _command(res: dict[str, Any]) -> str:
    cmd = res.get("cmd")
    text = " ".join(cmd) if isinstance(cmd, list) else str(cmd or "")
    text = " ".join(text.split())  # a shell loop on one line
    label = res.get("_ansible_item_label")  # a loop's item
    return _fit(f"{label}: {text}" if label else text)


# ---------------------------------------------------------------- grouping and text
def group(changes: dict[str, list[Change]], hosts: list[str]) -> list[dict[str, Any]]:
    """Hosts with the same changes as one group, the larger first; hosts without any
    change are a group too (changes: [])."""
    found: dict[tuple[Change, ...], list[str]] = {}
    for host in sorted(hosts, key=host_key):
        found.setdefault(tuple(changes.get(host, [])), []).append(host)
    ordered = sorted(found.items(), key=lambda kv: (not kv[0], -len(kv[1])))
    return [
        {"hosts": names, "label": host_ranges(names), "changes": list(key)}
        for key, names in ordered
    ]


def groups_doc(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups for --json."""
    return [
        {
            "hosts": g["hosts"],
            "label": g["label"],
            "count": len(g["changes"]),
            "changes": [
                {"task": c.task, "kind": c.kind, "lines": list(c.lines)} for c in g["changes"]
            ],
        }
        for g in groups
    ]


def render(groups: list[dict[str, Any]], *, check: bool, limit: int | None = DIFF_LINES) -> str:
    """One block per distinct change set; file diffs cut at ``limit`` lines (None: whole)."""
    verb = "would change" if check else "changed"
    blocks = []
    for g in groups:
        n = len(g["hosts"])
        who = f"{g['label']} ({n} host{'s' if n != 1 else ''})"
        if not g["changes"]:
            blocks.append(f"{who}: {'nothing to change' if check else 'no change'}")
            continue
        out = [f"{who}: {len(g['changes'])} task(s) {verb}"]
        for kind, title in KINDS:
            mine = [c for c in g["changes"] if c.kind == kind]
            if not mine:
                continue
            out.append(f"  {title}:")
            for change in mine:
                out += _entry(change, limit)
        blocks.append("\n".join(out))
    return "\n\n".join(blocks)


def _entry(change: Change, limit: int | None) -> list[str]:
    title = change.task.split(" | ")[-1]
    out = [f"    {change.task_id}  {_fit(title)}"]
    lines = list(change.lines)
    if limit is not None and change.kind == "file" and len(lines) > limit:
        cut = len(lines) - limit
        lines = [*lines[:limit], f"... {cut} more line(s) in {FILE_NAME}"]
    out += [f"      {_fit(line)}" for line in lines]
    return out


def summary(groups: list[dict[str, Any]], *, check: bool) -> str:
    """What the counts count, in one line."""
    hosts = sum(len(g["hosts"]) for g in groups)
    changing = [g for g in groups if g["changes"]]
    per = ", ".join(f"{g['label']}: {len(g['changes'])}" for g in changing) or "none"
    return (
        f"{'would change' if check else 'changed'} (tasks that change something, counted "
        f"as the real run counts them) per change set: {per}; {len(changing)} distinct "
        f"change set(s) across {hosts} host(s)"
    )


def write(run_dir: Path, groups: list[dict[str, Any]], *, check: bool) -> Path:
    """The whole diff, nothing truncated, beside the run's other records."""
    from gpuboot import paths

    path = run_dir / FILE_NAME
    text = render(groups, check=check, limit=None) + "\n\n" + summary(groups, check=check)
    paths.write_private(path, text + "\n")
    return path
