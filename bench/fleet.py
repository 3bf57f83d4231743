#!/usr/bin/env python3
"""Growth over fleet sizes, direct and through executors: for each size, a plain lab
(the controller reaches every node) and a lab of 2 halls (each hall's nodes run on its
executor), each brought up and taken down by the lab's own `gpuboot lab up/down`.

On each lab, in one run, every verb is timed right after `ansible all -m ping` on the
same nodes (its baseline, so load moves both alike):

  install (first converge), install (no-op), certify --probes none, certify --probes quick,
  scan: wall seconds, the ratio to ping, and controller CPU per node (user+sys of the
  gpuboot process and its descendants; the containers' CPU is never counted)
  through executors: the bytes the shards left under the run's shards/ per host

then the targets, and a projection to 1,024 and 10,000 nodes from the per-node costs
(its model and assumptions printed with it).

A hall node is out of the controller's reach, so the executor lab's ping goes through
the hall's executor (ssh ProxyCommand): the same nodes, one extra hop.

Usage: .venv/bin/python bench/fleet.py [--sizes 10,20,40] [--modes direct,executors]
       [--json] [--out RUN.json] [--add EARLIER.json ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
GPUBOOT = str(PROJECT / ".venv" / "bin" / "gpuboot")
MODES = ("direct", "executors")
HALLS = {"direct": 0, "executors": 2}
VERBS = ("install_first", "install_noop", "certify_none", "certify_quick", "scan")
ARGV = {
    "install_first": ["install"],
    "install_noop": ["install"],
    "certify_none": ["certify", "--probes", "none"],
    "certify_quick": ["certify", "--probes", "quick"],
    "scan": ["scan", "--probes", "none"],
}
PROJECT_TO = (1024, 10000)
PROJECT_EXECUTORS = (2, 8, 32)
# A verb's exit that is a measurement (1: a node failed, 7: partial certificates); any
# other one (2 bad input, 3 broken run, 8 executor lost) is recorded as not measured.
MEASURED_EXITS = (0, 1, 7)


@dataclass
class Timing:
    wall_s: float
    cpu_s: float  # user+sys of the command and its waited-for descendants
    exit: int
    out: str = ""
    err: str = ""


@dataclass
class Run:
    """One verb on one lab: its timing, its baseline's, and what its --json said."""

    verb: str
    wall_s: float
    cpu_s: float
    exit: int
    ping_s: float
    ping_cpu_s: float
    executors: dict[str, int] = field(default_factory=dict)  # who ran how many hosts
    stream_bytes: int = 0  # all the shards left under the run dir's shards/
    journal_bytes: int = 0  # of it, the shards' journal.jsonl (the events as read)
    note: str = ""  # why it is not a measurement

    @property
    def measured(self) -> bool:
        return self.exit in MEASURED_EXITS and not self.note


def timed(cmd: list[str], env: dict[str, str] | None = None) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    return Timing(wall, _cpu_since(before), proc.returncode, proc.stdout, proc.stderr)


def _cpu_since(before: resource.struct_rusage) -> float:
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


# ---- pure parts: what a verb's --json says, the fit, the projection, the report ----


def parse_result(doc: dict[str, Any]) -> tuple[dict[str, int], Path | None]:
    """Who ran how many hosts (install's ``hosts``, certify/scan's ``nodes``; a result
    without ``executor`` was run by the controller), and the run dir."""
    entries = doc.get("hosts") or doc.get("nodes") or {}
    rows = entries.values() if isinstance(entries, dict) else entries
    ran_by: dict[str, int] = {}
    for row in rows:
        who = row.get("executor") or "controller"
        ran_by[who] = ran_by.get(who, 0) + 1
    run_dir = doc.get("run_dir")
    return dict(sorted(ran_by.items())), Path(run_dir) if run_dir else None


def harness_errors(doc: dict[str, Any]) -> str:
    """Why the run is no measurement though it exited as one: nodes whose verdict is ERROR
    (their evidence could not be read: the harness, never the hardware), or ''."""
    nodes = [n for n in doc.get("nodes") or () if n.get("verdict") == "ERROR"]
    if not nodes:
        return ""
    reasons = [f.get("reason", "") for f in nodes[0].get("findings", ()) if f.get("reason")]
    return f"{len(nodes)} nodes ERROR (harness): {reasons[0] if reasons else 'no reason given'}"


def shard_bytes(run_dir: Path | None) -> tuple[int, int]:
    """(every file's bytes under ``<run_dir>/shards/``, of which the journals')."""
    root = run_dir / "shards" if run_dir else None
    if root is None or not root.is_dir():
        return 0, 0
    files = [p for p in root.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    return total, sum(p.stat().st_size for p in files if p.name == "journal.jsonl")


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b x``; one point (or one x): through the origin, ``a = 0``."""
    if not points:
        raise ValueError("no points to fit")
    xs = {x for x, _ in points}
    if len(xs) == 1:
        return 0.0, sum(y for _, y in points) / sum(x for x, _ in points)
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - b * mx, b


MODEL = """\
model (from the measured runs, per verb):
  controller CPU, direct:             C_d(N)    = a_d + b_d N
  controller CPU, through E executors: C_e(N, E) = a_d + k E + b_e N,
      (a_e, b_e) fitted at E = 2, k = (a_e - a_d) / 2: each executor's own fixed cost
  wall, direct:                        W_d(N)    = max(c_d + d_d N, C_d(N) / cores)
  wall, through E executors:           W_e(N, E) = max(c_e + d_e N / E, C_e(N, E) / cores),
      (c_e, d_e) fitted against the nodes per executor (N / 2 in the runs)
assumptions:
  - costs grow linearly with nodes over the measured sizes and beyond (Ansible's per-host
    worker, result handling and ssh per host; no batching effect past the largest size)
  - the controller has `cores` cores; it is the bottleneck once its CPU exceeds the wall
  - each executor runs its shard on its own cores, the halls balanced (N / E nodes each);
    in the lab the executors, the nodes and the controller share one machine, so the
    measured executor wall is pessimistic
  - forks (Ansible's parallelism) as in the runs; one sized fit per verb and mode
  - with one measured size the fits go through the origin (no fixed cost)"""


def fits(runs: dict[int, dict[str, dict[str, Run]]]) -> dict[str, dict[str, Any]]:
    """Per verb, the fitted lines of the model from ``runs[size][mode][verb]``."""
    out: dict[str, dict[str, Any]] = {}
    for verb in VERBS:
        lines: dict[str, Any] = {}
        for mode in MODES:
            measured = [
                (size, by_mode[mode][verb])
                for size, by_mode in sorted(runs.items())
                if verb in by_mode.get(mode, {}) and by_mode[mode][verb].measured
            ]
            if not measured:
                continue
            per_exec = HALLS[mode] or 1
            lines[mode] = {
                "cpu": fit_line([(n, r.cpu_s) for n, r in measured]),
                "wall": fit_line([(n / per_exec, r.wall_s) for n, r in measured]),
            }
        if "direct" in lines:
            out[verb] = lines
    return out


def project(
    line: dict[str, Any], nodes: int, executors: int, cores: int = 2
) -> dict[str, float] | None:
    """Controller CPU seconds and wall seconds of one verb at ``nodes`` nodes, direct
    (``executors`` 0) or through ``executors`` executors; None without the executor fit."""
    a_d, b_d = line["direct"]["cpu"]
    if executors == 0:
        cpu = a_d + b_d * nodes
        c, d = line["direct"]["wall"]
        return {"cpu_s": cpu, "wall_s": max(c + d * nodes, cpu / cores)}
    if "executors" not in line:
        return None
    a_e, b_e = line["executors"]["cpu"]
    k = (a_e - a_d) / HALLS["executors"]
    cpu = a_d + k * executors + b_e * nodes
    c, d = line["executors"]["wall"]
    return {"cpu_s": cpu, "wall_s": max(c + d * nodes / executors, cpu / cores)}


def targets(runs: dict[int, dict[str, dict[str, Run]]]) -> list[dict[str, Any]]:
    """The targets: through 2 executors, controller CPU per node <= 1/3 of direct for
    install and scan (each size); direct at the largest size (40 asked), scan <= 1.5x and
    install no-op <= 1.3x ping."""
    rows: list[dict[str, Any]] = []
    for size, by_mode in sorted(runs.items()):
        for verb in ("install_first", "install_noop", "scan"):
            d = by_mode.get("direct", {}).get(verb)
            e = by_mode.get("executors", {}).get(verb)
            if not (d and e and d.measured and e.measured):
                continue
            ratio = e.cpu_s / d.cpu_s if d.cpu_s else float("inf")
            rows.append(
                {
                    "target": f"{size} nodes, {verb}: CPU/node through 2 executors <= 1/3 direct",
                    "figures": f"{e.cpu_s / size:.3f} / {d.cpu_s / size:.3f} s = {ratio:.2f}",
                    "met": ratio <= 1 / 3,
                }
            )
    largest = max(runs) if runs else 0
    for verb, limit in (("scan", 1.5), ("install_noop", 1.3)):
        r = runs.get(largest, {}).get("direct", {}).get(verb)
        if not (r and r.measured):
            continue
        rows.append(
            {
                "target": f"direct, {largest} nodes: {verb} <= {limit}x ping",
                "figures": f"{r.wall_s:.1f} / {r.ping_s:.1f} s = {r.wall_s / r.ping_s:.2f}x",
                "met": r.wall_s / r.ping_s <= limit,
            }
        )
    return rows


def report_text(doc: dict[str, Any], runs: dict[int, dict[str, dict[str, Run]]]) -> str:
    """The table, the targets, the projection with its model."""
    lines = [
        f"fleet bench {doc['started']} UTC, stack {doc['stack']}, {doc['cores']} cores, "
        f"load (1 min) at start {doc['load_at_start']:.1f}",
        *(
            f"with the runs of {a['file']} ({a['started']} UTC, load at start "
            f"{a['load_at_start']:.1f})"
            for a in doc.get("added", ())
        ),
        "",
        f"{'nodes':>5} {'mode':<9} {'verb':<13} {'wall s':>7} {'ping s':>7} {'x ping':>7} "
        f"{'CPU s/node':>10} {'ping CPU/node':>13} {'stream B/host':>13}  ran by / note",
    ]
    for size, by_mode in sorted(runs.items()):
        for mode in MODES:
            for verb in VERBS:
                r = by_mode.get(mode, {}).get(verb)
                if r is None:
                    continue
                who = ", ".join(f"{k} {v}" for k, v in r.executors.items())
                tail = who if r.measured else f"exit {r.exit}, not measured: {r.note}"
                stream = f"{r.stream_bytes // size:>13}" if r.stream_bytes else f"{'-':>13}"
                lines.append(
                    f"{size:>5} {mode:<9} {verb:<13} {r.wall_s:>7.1f} {r.ping_s:>7.1f} "
                    f"{r.wall_s / r.ping_s:>6.2f}x {r.cpu_s / size:>10.3f} "
                    f"{r.ping_cpu_s / size:>13.3f} {stream}  {tail}"
                )
    lines.append("")
    lines.append("targets:")
    for t in targets(runs):
        lines.append(f"  {'met    ' if t['met'] else 'NOT met'}  {t['target']}: {t['figures']}")
    lines.append("")
    lines.append(MODEL.replace("`cores`", str(doc["cores"])))
    lines.append("")
    lines.append("projection (controller CPU s / wall s):")
    lines.append(f"  {'verb':<13} {'nodes':>6} {'direct':>17}" + "".join(
        f" {f'{e} executors':>17}" for e in PROJECT_EXECUTORS
    ))  # fmt: skip
    for verb, line in fits(runs).items():
        for nodes in PROJECT_TO:
            cells = []
            for e in (0, *PROJECT_EXECUTORS):
                p = project(line, nodes, e, doc["cores"])
                cells.append(f"{p['cpu_s']:>8.0f} /{p['wall_s']:>7.0f}" if p else f"{'-':>17}")
            lines.append(f"  {verb:<13} {nodes:>6} " + " ".join(cells))
    return "\n".join(lines)


def report_doc(doc: dict[str, Any], runs: dict[int, dict[str, dict[str, Run]]]) -> dict:
    """The --json document: the runs, the targets, the fits and the projection."""
    projection = {
        verb: {
            str(nodes): {
                str(e): project(line, nodes, e, doc["cores"]) for e in (0, *PROJECT_EXECUTORS)
            }
            for nodes in PROJECT_TO
        }
        for verb, line in fits(runs).items()
    }
    return {
        **doc,
        "runs": {
            str(size): {
                mode: {verb: asdict(r) for verb, r in by_verb.items()}
                for mode, by_verb in by_mode.items()
            }
            for size, by_mode in runs.items()
        },
        "targets": targets(runs),
        "fits": fits(runs),
        "model": MODEL,
        "projection": projection,
    }


def runs_from_doc(doc: dict[str, Any]) -> dict[int, dict[str, dict[str, Run]]]:
    """The runs of an earlier --json document (``--add``), as this run keeps its own."""
    return {
        int(size): {
            mode: {verb: Run(**fields) for verb, fields in by_verb.items()}
            for mode, by_verb in by_mode.items()
        }
        for size, by_mode in doc.get("runs", {}).items()
    }


def merge(
    runs: dict[int, dict[str, dict[str, Run]]], earlier: dict[int, dict[str, dict[str, Run]]]
) -> dict[int, dict[str, dict[str, Run]]]:
    """This run's labs, and the earlier ones' where this run has none (size and mode)."""
    merged = {size: dict(by_mode) for size, by_mode in earlier.items()}
    for size, by_mode in runs.items():
        merged.setdefault(size, {}).update(by_mode)
    return merged


# ---- the runs (processes, labs) ----


def _json(t: Timing) -> dict[str, Any]:
    try:
        doc = json.loads(t.out)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _why(t: Timing) -> str:
    doc = _json(t)
    hosts = doc.get("hosts") or {}
    unknown = [h.get("reason") for h in hosts.values() if h.get("status") == "unknown"]
    said = (
        doc.get("error")
        or doc.get("message")
        or (f"{len(unknown)} hosts unknown: {unknown[0]}" if unknown else "")
        or (t.err.strip().splitlines() or [""])[-1]
    )
    return str(said)[:300]


def hall_pings(inventory: Path, lab_doc: dict[str, Any], env: dict[str, str]) -> list[list[str]]:
    """One `ansible -m ping` per hall, its nodes reached through the hall's executor."""
    import yaml

    inv = yaml.safe_load(inventory.read_text())
    allvars = inv["all"].get("vars", {})
    user = allvars.get("ansible_user", "root")
    key = allvars.get("ansible_ssh_private_key_file")
    cmds = []
    for hall in lab_doc["halls"]:
        nodes = [n["name"] for n in lab_doc["nodes"] if n.get("domain") == hall["domain"]]
        jump = ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        jump += ["-o", "BatchMode=yes", *(["-i", key] if key else []), "-W", "%h:%p"]
        jump.append(f"{user}@{hall['ip']}")
        ssh_args = (
            "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
            f"-o ProxyCommand={shlex.quote(shlex.join(jump))}"
        )
        extra = json.dumps({"ansible_ssh_common_args": ssh_args})
        cmds.append(["ansible", ",".join(nodes), "-i", str(inventory), "-m", "ping", "-e", extra])
    return cmds


def ping(cmds: list[list[str]], env: dict[str, str]) -> Timing:
    """The baseline: every command at once (one per hall), timed together."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    procs = [
        subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in cmds
    ]
    outs = [p.communicate() for p in procs]
    wall = time.monotonic() - started
    code = max(p.returncode for p in procs)
    if code != 0:
        tail = b"".join(o + e for o, e in outs).decode(errors="replace")[-2000:]
        raise SystemExit(f"fleet bench: the ping baseline failed (exit {code}):\n{tail}")
    return Timing(wall, _cpu_since(before), code)


def bench_lab(size: int, mode: str, args, env: dict[str, str], say) -> dict[str, Run]:
    name = f"fleet-{uuid.uuid4().hex[:6]}"
    up = [GPUBOOT, "lab", "up", "--name", name, "--nodes", str(size), "--json", "-q"]
    up += ["--stack", args.stack, "--halls", str(HALLS[mode])]
    runs: dict[str, Run] = {}
    say(f"{size} nodes, {mode}: lab {name} up")
    try:
        t = timed(up)
        if t.exit != 0:
            raise SystemExit(f"fleet bench: lab up failed (exit {t.exit}): {_why(t)}")
        lab_doc = _json(t)
        inventory = Path(lab_doc["inventory"])
        runs["lab_up"] = Run("lab_up", t.wall_s, t.cpu_s, t.exit, 0.0, 0.0)
        if HALLS[mode]:
            say("executor setup")
            t = timed([GPUBOOT, "executor", "setup", "-i", str(inventory), "--json", "-q"])
            runs["executor_setup"] = Run("executor_setup", t.wall_s, t.cpu_s, t.exit, 0.0, 0.0)
            if t.exit != 0:
                raise SystemExit(f"fleet bench: executor setup failed (exit {t.exit}): {_why(t)}")
            pings = hall_pings(inventory, lab_doc, env)
        else:
            pings = [["ansible", "all", "-i", str(inventory), "-m", "ping"]]
        history = Path(args.scratch) / f"{name}-scan-history.jsonl"
        for verb in VERBS:
            base = ping(pings, env)
            extra = ["--history", str(history)] if verb == "scan" else []
            say(f"{verb} (ping {base.wall_s:.1f} s)")
            t = timed([GPUBOOT, *ARGV[verb], "-i", str(inventory), "--json", "-q", *extra])
            ran_by, run_dir = parse_result(_json(t))
            total, journals = shard_bytes(run_dir)
            run = Run(verb, t.wall_s, t.cpu_s, t.exit, base.wall_s, base.cpu_s, ran_by)
            run.stream_bytes, run.journal_bytes = total, journals
            run.note = _why(t) if t.exit not in MEASURED_EXITS else harness_errors(_json(t))
            runs[verb] = run
            say(f"{verb}: {t.wall_s:.1f} s, exit {t.exit}, CPU {t.cpu_s / size:.3f} s/node")
    finally:
        subprocess.run([GPUBOOT, "lab", "down", "--name", name, "-q"], capture_output=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,20,40", help="fleet sizes, a comma list")
    parser.add_argument("--modes", default="direct,executors", help="direct, executors or both")
    parser.add_argument("--stack", default="lts-550-cuda12.4")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the --json document to this file")
    parser.add_argument(
        "--add",
        action="append",
        default=[],
        metavar="JSON",
        help="an earlier run's --json document: its labs join this run's in the targets, "
        "fits and projection (a size and mode measured now wins)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    modes = [m for m in args.modes.split(",") if m in MODES]
    sys.path.insert(0, str(PROJECT))
    from gpuboot import paths
    from gpuboot.runner import ansible_env, close_ssh_masters

    paths.put_venv_on_path()
    args.scratch = tempfile.mkdtemp(prefix="gpuboot-fleet-")
    env = {**os.environ, **ansible_env(Path(args.scratch))}
    doc = {
        "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "stack": args.stack,
        "cores": os.cpu_count() or 1,
        "load_at_start": os.getloadavg()[0],
    }
    earlier: dict[int, dict[str, dict[str, Run]]] = {}
    for path in args.add:
        added = json.loads(Path(path).read_text())
        earlier = merge(runs_from_doc(added), earlier)
        doc.setdefault("added", []).append(
            {k: added.get(k) for k in ("started", "load_at_start", "load_at_end")} | {"file": path}
        )

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", file=sys.stderr)

    runs: dict[int, dict[str, dict[str, Run]]] = {}
    try:
        for size in sizes:
            for mode in modes:
                labs = bench_lab(size, mode, args, env, say)
                runs.setdefault(size, {})[mode] = {v: labs[v] for v in VERBS if v in labs}
                doc.setdefault("setup", {}).setdefault(str(size), {})[mode] = {
                    k: asdict(labs[k]) for k in ("lab_up", "executor_setup") if k in labs
                }
                if args.out:  # a partial document survives a later size's failure
                    Path(args.out).write_text(json.dumps(report_doc(doc, runs), indent=2))
    finally:
        close_ssh_masters(Path(args.scratch) / "cp")
    doc["load_at_end"] = os.getloadavg()[0]
    runs = merge(runs, earlier)
    if args.out:
        Path(args.out).write_text(json.dumps(report_doc(doc, runs), indent=2))
    print(json.dumps(report_doc(doc, runs), indent=2) if args.json else report_text(doc, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
