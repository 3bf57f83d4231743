#!/usr/bin/env python3
"""Growth over fleet sizes, direct and through executors: for each size, a plain lab
(the controller reaches every node) and a lab of 2 halls (each hall's nodes run on its
executor), each brought up and taken down by the lab's own `gpuboot lab up/down`.

On each lab, in one run, every verb is timed right after `ansible all -m ping` on the
same nodes (its baseline, so load moves both alike):

  install (first converge), install (no-op), certify --probes none, certify --probes quick,
  scan: wall seconds, the ratio to ping, and controller CPU per node (user+sys of the
  gpuboot process and its descendants; the containers' CPU is never counted)
  after certify and scan, the judging floor: the run's bundle judged again on the
  controller alone (`gpuboot evaluate`: start-up, reading, rules; no host touched), its
  CPU per node, and the verb's CPU net of it (what collecting the evidence costs)
  through executors: the bytes the shards left under the run's shards/ per host, the
  journal of events and the rest
  for install and scan measured both ways, the verb's CPU split as its report tells it
  (controller_cpu_s): reaching the nodes (what executors take over) and the rest (the
  controller's whoever collected: start-up, inventory, keeping, judging, reports)

then the targets, and a projection to 1,024 and 10,000 nodes from the per-node costs
(its model and assumptions printed with it).

Modes `mitogen` and `mitogen-executors`: a plain lab, or one of 2 halls, where install
(first converge, no-op) runs with `--strategy mitogen` (gpuboot[fast]; executor setup ships
it to the executors), set against the linear strategy of the same kind of lab.

A hall node is out of the controller's reach, so the executor lab's ping goes through
the hall's executor (ssh ProxyCommand): the same nodes, one extra hop.

Usage: .venv/bin/python bench/fleet.py [--sizes 10,20,40]
       [--modes direct,executors,mitogen,mitogen-executors] [--json] [--out RUN.json]
       [--add EARLIER.json ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
GPUBOOT = str(PROJECT / ".venv" / "bin" / "gpuboot")
MODES = ("direct", "executors", "mitogen", "mitogen-executors")
PROJECTED = ("direct", "executors")  # the modes the model fits (mitogen: set against direct)
HALLS = {"direct": 0, "executors": 2, "mitogen": 0, "mitogen-executors": 2}
# each mitogen mode against the linear mode of the same kind of lab
LINEAR_OF = {"mitogen": "direct", "mitogen-executors": "executors"}
VERBS = ("install_first", "install_noop", "certify_none", "certify_quick", "scan")
INSTALLS = ("install_first", "install_noop")
MODE_VERBS = {"direct": VERBS, "executors": VERBS} | dict.fromkeys(LINEAR_OF, INSTALLS)
ARGV = {
    "install_first": ["install"],
    "install_noop": ["install"],
    "certify_none": ["certify", "--probes", "none"],
    "certify_quick": ["certify", "--probes", "quick"],
    "scan": ["scan", "--probes", "none"],
}
MITOGEN = ["--strategy", "mitogen"]
MODE_ARGV = {"mitogen": MITOGEN, "mitogen-executors": MITOGEN}  # after install's own
JUDGED = ("certify_none", "certify_quick", "scan")  # verbs whose evidence is judged again
PROJECT_TO = (1024, 10000)
PROJECT_EXECUTORS = (2, 8, 32)
# A verb's exit that is a measurement (1: a node failed, 7: partial certificates); any
# other one (2 bad input, 3 broken run, 8 executor lost) is recorded as not measured.
MEASURED_EXITS = (0, 1, 7)
JUDGE_EXITS = (0, 1)  # evaluate: every node judged (1: one FAILed)


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
    # the judging floor: the run's bundle judged again by `gpuboot evaluate` (None: not
    # measured, judge_note says why when it was tried)
    judge_cpu_s: float | None = None
    judge_note: str = ""
    busy_s: float = 0.0  # the machine's CPUs busy during the verb (nodes and controller)
    # of cpu_s, reaching the nodes (pre-flight, collection, pair probes: what executors take
    # over) as the verb's report tells it (controller_cpu_s.reach); None: not told
    reach_cpu_s: float | None = None

    @property
    def measured(self) -> bool:
        return self.exit in MEASURED_EXITS and not self.note

    @property
    def judged(self) -> bool:
        """The judging floor was measured (and agrees with the verb's verdicts)."""
        return self.measured and self.judge_cpu_s is not None and not self.judge_note

    @property
    def net_cpu_s(self) -> float | None:
        """The verb's CPU net of judging: what reaching the nodes and bringing the
        evidence home cost the controller."""
        return self.cpu_s - self.judge_cpu_s if self.judged else None


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


def said(doc: dict[str, Any]) -> str:
    """The message of a verb's --json error document (``error`` holds its message, where
    and hint), or ''."""
    error = doc.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or "")
    return str(error or doc.get("message") or "")


def judge_problem(verb_doc: dict[str, Any], judge_exit: int, judge_doc: dict[str, Any]) -> str:
    """Why `gpuboot evaluate` of a run's bundle is no floor for that run, or '': it did
    not judge (an exit other than 0/1), judged other hosts, or could not read evidence
    the run itself judged (a node ERROR there and not in the run)."""
    if judge_exit not in JUDGE_EXITS:
        return f"evaluate exit {judge_exit}: {(said(judge_doc) or 'no --json document')[:200]}"
    verdicts = {n.get("host"): n.get("verdict") for n in verb_doc.get("nodes") or ()}
    again = {n.get("host"): n.get("verdict") for n in judge_doc.get("nodes") or ()}
    if set(verdicts) != set(again):
        return f"evaluate judged {len(again)} hosts, the run {len(verdicts)}"
    lost = sorted(h for h, v in again.items() if v == "ERROR" and verdicts[h] != "ERROR")
    if lost:
        return f"evaluate found {len(lost)} nodes ERROR the run judged ({lost[0]}...)"
    return ""


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
        for mode in PROJECTED:
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
            if judged := [(n, r.judge_cpu_s) for n, r in measured if r.judged]:
                lines[mode]["judge"] = fit_line(judged)
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


def floor_at(line: dict[str, Any], nodes: int) -> dict[str, float] | None:
    """The judging floor projected to ``nodes``: the executor lab's judging fit (its
    fixed start and its cost per node), and its share of direct's projected CPU."""
    fit = line.get("executors", {}).get("judge")
    if fit is None:
        return None
    cpu = fit[0] + fit[1] * nodes
    return {"cpu_s": cpu, "of_direct": cpu / project(line, nodes, 0)["cpu_s"]}


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
            row = {
                "target": f"{size} nodes, {verb}: CPU/node through 2 executors <= 1/3 direct",
                "figures": f"{e.cpu_s / size:.3f} / {d.cpu_s / size:.3f} s = {ratio:.2f}",
                "met": ratio <= 1 / 3,
            }
            if floor := judging_floor(d, e, size):
                row["floor"] = floor
            if split := reach_split(d, e, size):
                row["reach"] = split
            rows.append(row)
    rows += fleet_targets(runs)
    largest = max(runs) if runs else 0
    for verb, limit in (("scan", 1.5), ("install_noop", 1.3)):
        r = runs.get(largest, {}).get("direct", {}).get(verb)
        if not (r and r.measured):
            continue
        row = {
            "target": f"direct, {largest} nodes: {verb} <= {limit}x ping",
            "figures": f"{r.wall_s:.1f} / {r.ping_s:.1f} s = {r.wall_s / r.ping_s:.2f}x",
            "met": r.wall_s / r.ping_s <= limit,
        }
        if r.busy_s:
            row["floor"] = cores_floor(r, verb)
        rows.append(row)
    return rows


FLEET = 1024  # the clusters gpuboot is for: 128 to 1,024 eight-GPU servers


def fleet_targets(runs: dict[int, dict[str, dict[str, Run]]]) -> list[dict[str, Any]]:
    """The CPU target at the size of fleet it is for, from the fits over the measured
    sizes (two at least, both ways: one size cannot tell a verb's fixed start, the same
    whoever reaches the nodes, from its cost per node), with each way's cost per node."""
    sized = {
        verb: sum(
            1
            for by_mode in runs.values()
            if all(m in by_mode and verb in by_mode[m] and by_mode[m][verb].measured
                   for m in PROJECTED)
        )
        for verb in ("install_first", "install_noop", "scan")
    }  # fmt: skip
    rows = []
    for verb, line in fits(runs).items():
        if sized.get(verb, 0) < 2 or "executors" not in line:
            continue
        e = project(line, FLEET, HALLS["executors"])["cpu_s"]
        d = project(line, FLEET, 0)["cpu_s"]
        per_d, per_e = line["direct"]["cpu"][1], line["executors"]["cpu"][1]
        fitted = f"fits over {sized[verb]} sizes; per node beyond the fixed start"
        row = {
            "target": f"{FLEET:,} nodes projected, {verb}: CPU/node through "
            f"{HALLS['executors']} executors <= 1/3 direct",
            "figures": f"{e / FLEET:.3f} / {d / FLEET:.3f} s = {e / d:.2f} "
            f"({fitted} {per_e:.3f} / {per_d:.3f} s)",
            "met": e <= d / 3,
            "projected": True,
        }  # fmt: skip
        if per_e <= 0 or per_d <= 0:  # CPU that falls as nodes are added: noise, not growth
            row["met"] = None
            row["figures"] = (
                f"no verdict: a cost per node that is not positive ({fitted} {per_e:.3f} / "
                f"{per_d:.3f} s): the runs' noise exceeds their growth; measure again"
            )
        rows.append(row)
    return rows


def cores_floor(r: Run, verb: str) -> dict[str, Any]:
    """The wall the machine's cores needed for the verb: every CPU second the machine spent
    meanwhile (the lab's nodes share the controller's cores), over its cores. A wall near
    it was the machine's work, not waiting, so no controller change reaches the target."""
    cores = os.cpu_count() or 1
    floor = r.busy_s / cores
    return {
        "busy_s": round(r.busy_s, 1),
        "wall_floor_s": round(floor, 1),
        "text": f"floor: the machine's {cores} cores were busy {r.busy_s:.1f} s (nodes and "
        f"controller) = {floor:.1f} s of wall = {floor / r.ping_s:.2f}x ping; the wall was "
        f"{r.wall_s / floor:.2f}x that floor"
        if floor
        else f"{verb}: no busy time measured",
    }


def judging_floor(direct: Run, routed: Run, size: int) -> dict[str, Any] | None:
    """What the executors cannot take from the controller, as a share of direct's CPU:
    judging the evidence (one judge, on the controller by design), from the routed run's
    own re-judging; and the ratio net of judging on both sides (None where either run's
    floor was not measured, or direct cost no more than its judging)."""
    if not (direct.judged and routed.judged and direct.cpu_s):
        return None
    judge = routed.judge_cpu_s / size
    share = routed.judge_cpu_s / direct.cpu_s
    net = routed.net_cpu_s / direct.net_cpu_s if direct.net_cpu_s > 0 else None
    ratio = routed.cpu_s / direct.cpu_s
    text = (
        f"ratio {ratio:.2f} (target 1/3); floor: judging {judge:.3f} s/node = {share:.2f} of "
        f"direct; net of judging: {max(routed.net_cpu_s, 0) / size:.3f} / "
        f"{max(direct.net_cpu_s, 0) / size:.3f} s/node = "
        + (f"{net:.2f}" if net is not None else "n/a (direct cost no more than its judging)")
    )
    if share > 1 / 3:
        text += "; the target lies below this floor"
    return {
        "judge_s_per_node": judge,
        "of_direct": share,
        "net_ratio": net,
        "below_floor": share > 1 / 3,
        "text": text,
    }


def reach_split(direct: Run, routed: Run, size: int) -> dict[str, Any] | None:
    """The verb's CPU split as its reports tell it: reaching the nodes (what executors take
    over), each way, and the rest (start-up, the inventory, keeping, judging, recording and
    reporting the evidence: the controller's whoever collected it). None where either run
    did not tell its reach."""
    if direct.reach_cpu_s is None or routed.reach_cpu_s is None or not direct.reach_cpu_s:
        return None
    ratio = routed.reach_cpu_s / direct.reach_cpu_s
    rest_d, rest_e = direct.cpu_s - direct.reach_cpu_s, routed.cpu_s - routed.reach_cpu_s
    # the rest alone is what the verb would cost through executors were reaching free
    floor = rest_e / direct.cpu_s if direct.cpu_s else float("inf")
    return {
        "ratio": ratio,
        "met": ratio <= 1 / 3,
        "rest_s_per_node": {"direct": rest_d / size, "executors": rest_e / size},
        "rest_of_direct": floor,
        "below_floor": floor > 1 / 3,
        "text": f"reaching the nodes: {routed.reach_cpu_s / size:.3f} / "
        f"{direct.reach_cpu_s / size:.3f} s/node = {ratio:.2f} "
        f"({'<=' if ratio <= 1 / 3 else '>'} 1/3); the rest, the controller's either way: "
        f"{rest_e / size:.3f} / {rest_d / size:.3f} s/node; the rest alone through executors "
        f"= {floor:.2f} of direct" + ("; the target lies below it" if floor > 1 / 3 else ""),
    }


def floor_rows(runs: dict[int, dict[str, dict[str, Run]]]) -> list[str]:
    """Every judged verb measured both ways: its ratio, the judging floor, net of it."""
    rows = []
    for size, by_mode in sorted(runs.items()):
        for verb in JUDGED:
            d = by_mode.get("direct", {}).get(verb)
            e = by_mode.get("executors", {}).get(verb)
            if d and e and d.measured and e.measured and (floor := judging_floor(d, e, size)):
                rows.append(f"  {size} nodes, {verb}: {floor['text']}")
    return rows


def mitogen_rows(runs: dict[int, dict[str, dict[str, Run]]]) -> list[str]:
    """Install with mitogen's strategy against the same kind of lab's linear one, per size."""
    rows = []
    for size, by_mode in sorted(runs.items()):
        for (mode, linear), verb in itertools.product(LINEAR_OF.items(), INSTALLS):
            m = by_mode.get(mode, {}).get(verb)
            d = by_mode.get(linear, {}).get(verb)
            if not (m and d and m.measured and d.measured and d.wall_s and d.cpu_s):
                continue
            rows.append(
                f"  {size} nodes, {mode} {verb}: wall {m.wall_s:.1f} / {d.wall_s:.1f} s = "
                f"{m.wall_s / d.wall_s:.2f}x, CPU/node {m.cpu_s / size:.3f} / "
                f"{d.cpu_s / size:.3f} s = {m.cpu_s / d.cpu_s:.2f}x"
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
        f"{'CPU s/node':>10} {'judge':>7} {'net':>7} {'ping CPU':>8} "
        f"{'journal B/host':>14} {'rest B/host':>11}  ran by / note",
    ]
    for size, by_mode in sorted(runs.items()):
        for mode in MODES:
            for verb in VERBS:
                r = by_mode.get(mode, {}).get(verb)
                if r is None:
                    continue
                lines.append(_row(size, mode, r))
    lines.append(
        "  (per node: judge = the run's bundle judged again by `gpuboot evaluate` alone, net ="
        " CPU - judge; ping CPU = the baseline's; journal/rest = the shards' stream)"
    )
    lines.append("")
    lines.append("targets:")
    for t in targets(runs):
        said = {True: "met    ", False: "NOT met", None: "no fit "}[t["met"]]
        lines.append(f"  {said}  {t['target']}: {t['figures']}")
        for part in ("floor", "reach"):
            if part in t:
                lines.append(f"           {t[part]['text']}")
    if floors := floor_rows(runs):
        lines += ["", "judging floor, through 2 executors against direct (CPU per node):", *floors]
    if mitogen := mitogen_rows(runs):
        lines += ["", "install with --strategy mitogen / linear (the same kind of lab):", *mitogen]
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
    floors = [(verb, line) for verb, line in fits(runs).items() if floor_at(line, 1)]
    if floors:
        lines += ["", "judging floor through executors (its fit; share of direct's CPU):"]
    for verb, line in floors:
        a, b = line["executors"]["judge"]
        at = ", ".join(
            f"{n:,} nodes {floor_at(line, n)['cpu_s']:.0f} s = {floor_at(line, n)['of_direct']:.2f}"
            for n in PROJECT_TO
        )
        # one size cannot tell the fixed start from the cost per node: all of it is per node
        alone = " (one size: its fixed start counted per node, overstated)" if a == 0 else ""
        lines.append(f"  {verb:<13} {a:.2f} s + {b:.4f} s/node: {at}{alone}")
    return "\n".join(lines)


def _row(size: int, mode: str, r: Run) -> str:
    who = ", ".join(f"{k} {v}" for k, v in r.executors.items())
    tail = who if r.measured else f"exit {r.exit}, not measured: {r.note}"
    if r.measured and r.judge_note:
        tail += f" (judging floor not measured: {r.judge_note})"

    def per_node(value: float | None, width: int) -> str:
        return f"{value / size:>{width}.3f}" if value is not None else f"{'-':>{width}}"

    journal = r.journal_bytes // size if r.stream_bytes else None
    rest = (r.stream_bytes - r.journal_bytes) // size if r.stream_bytes else None
    return (
        f"{size:>5} {mode:<9} {r.verb:<13} {r.wall_s:>7.1f} {r.ping_s:>7.1f} "
        f"{r.wall_s / r.ping_s:>6.2f}x {r.cpu_s / size:>10.3f} "
        f"{per_node(r.judge_cpu_s if r.judged else None, 7)} {per_node(r.net_cpu_s, 7)} "
        f"{r.ping_cpu_s / size:>8.3f} "
        f"{journal if journal is not None else '-':>14} {rest if rest is not None else '-':>11}"
        f"  {tail}"
    )


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
    floors = {
        verb: {str(n): floor_at(line, n) for n in PROJECT_TO}
        for verb, line in fits(runs).items()
        if floor_at(line, 1)
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
        "judging_floor": floors,
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


# ---- the runs (processes, labs: bench/fleet_procs.py) ----


def _why(t) -> str:
    doc = t.json()
    hosts = doc.get("hosts") or {}
    unknown = [h.get("reason") for h in hosts.values() if h.get("status") == "unknown"]
    executors = (doc.get("executors") or {}).items()  # executor setup's, each with its reason
    failed = [f"{n}: {e.get('reason')}" for n, e in executors if e.get("status") == "failed"]
    why = (
        said(doc)
        or (f"{len(unknown)} hosts unknown: {unknown[0]}" if unknown else "")
        or "; ".join(failed)
        or (t.err.strip().splitlines() or [""])[-1]
    )
    return why[:300]


def measure_judging(run: Run, verb_doc: dict[str, Any]) -> None:
    """The run's bundle judged again on the controller alone, as its floor (run's
    judge_cpu_s, or judge_note saying why not)."""
    from fleet_procs import timed

    bundle = verb_doc.get("bundle")
    if not bundle:
        run.judge_note = "the run names no bundle"
        return
    t = timed([GPUBOOT, "evaluate", "--bundle", str(bundle), "--json", "-q"])
    run.judge_cpu_s = t.cpu_s
    run.judge_note = judge_problem(verb_doc, t.exit, t.json())


def bench_lab(size: int, mode: str, args, env: dict[str, str], say) -> dict[str, Run]:
    from fleet_procs import hall_pings, lab, ping, timed

    name = f"fleet-{uuid.uuid4().hex[:6]}"
    up = ["--nodes", str(size), "--stack", args.stack, "--halls", str(HALLS[mode])]
    runs: dict[str, Run] = {}
    say(f"{size} nodes, {mode}: lab {name} up")
    with lab(GPUBOOT, name, up) as t:
        lab_doc = t.json()
        inventory = Path(lab_doc["inventory"])
        runs["lab_up"] = Run("lab_up", t.wall_s, t.cpu_s, t.exit, 0.0, 0.0)
        if HALLS[mode]:
            say("executor setup")
            t = timed([GPUBOOT, "executor", "setup", "-i", str(inventory), "--json", "-q"])
            runs["executor_setup"] = Run("executor_setup", t.wall_s, t.cpu_s, t.exit, 0.0, 0.0)
            if t.exit != 0:
                raise SystemExit(f"fleet bench: executor setup failed (exit {t.exit}): {_why(t)}")
            pings = hall_pings(inventory, lab_doc)
        else:
            pings = [["ansible", "all", "-i", str(inventory), "-m", "ping"]]
        history = Path(args.scratch) / f"{name}-scan-history.jsonl"
        for verb in MODE_VERBS[mode]:
            base = ping(pings, env)
            extra = ["--history", str(history)] if verb == "scan" else []
            if verb.startswith("install"):
                extra += MODE_ARGV.get(mode, [])
            say(f"{verb} (ping {base.wall_s:.1f} s)")
            t = timed([GPUBOOT, *ARGV[verb], "-i", str(inventory), "--json", "-q", *extra])
            doc = t.json()
            ran_by, run_dir = parse_result(doc)
            run = Run(verb, t.wall_s, t.cpu_s, t.exit, base.wall_s, base.cpu_s, ran_by)
            run.busy_s = t.busy_s
            run.reach_cpu_s = (doc.get("controller_cpu_s") or {}).get("reach")
            run.stream_bytes, run.journal_bytes = shard_bytes(run_dir)
            run.note = _why(t) if t.exit not in MEASURED_EXITS else harness_errors(doc)
            said = f"{verb}: {t.wall_s:.1f} s, exit {t.exit}, CPU {t.cpu_s / size:.3f} s/node"
            if verb in JUDGED and run.measured:
                measure_judging(run, doc)
                said += f", judging {run.judge_cpu_s / size:.3f} s/node"
                said += f" (no floor: {run.judge_note})" if run.judge_note else ""
            runs[verb] = run
            say(said)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,20,40", help="fleet sizes, a comma list")
    parser.add_argument(
        "--modes",
        default="direct,executors",
        help="a comma list of: direct, executors (2 halls), mitogen and mitogen-executors "
        "(install only, --strategy mitogen, on a plain lab or one of 2 halls)",
    )
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
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if not sizes or not all(s.isdigit() and int(s) >= HALLS["executors"] for s in sizes):
        parser.error(f"--sizes {args.sizes!r}: a comma list of node counts of at least 2")
    sizes = [int(s) for s in sizes]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes {args.modes!r}: a comma list of {', '.join(MODES)}")
    sys.path.insert(0, str(PROJECT))
    from fleet_procs import stop_on_sigterm

    from gpuboot import paths
    from gpuboot.runner import ansible_env, close_ssh_masters, control_dir

    stop_on_sigterm()
    paths.put_venv_on_path()
    args.scratch = tempfile.mkdtemp(prefix="gpuboot-fleet-")
    # the verbs keep their runs here, not with the operator's: a scan's trend page reads
    # the kept runs, a cost of this machine's history rather than of the fleet measured
    os.environ["GPUBOOT_RUNS"] = str(Path(args.scratch) / "runs")
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
                runs.setdefault(size, {})[mode] = {v: labs[v] for v in MODE_VERBS[mode]}
                doc.setdefault("setup", {}).setdefault(str(size), {})[mode] = {
                    k: asdict(labs[k]) for k in ("lab_up", "executor_setup") if k in labs
                }
                if args.out:  # a partial document survives a later size's failure
                    Path(args.out).write_text(json.dumps(report_doc(doc, runs), indent=2))
    finally:
        close_ssh_masters(control_dir(Path(args.scratch)))
    doc["load_at_end"] = os.getloadavg()[0]
    runs = merge(runs, earlier)
    if args.out:
        Path(args.out).write_text(json.dumps(report_doc(doc, runs), indent=2))
    print(json.dumps(report_doc(doc, runs), indent=2) if args.json else report_text(doc, runs))
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the labs went down on the way out
        why = stop.args[0] if stop.args else "Ctrl-C"
        print(f"fleet bench: stopped ({why}); every lab it brought up is down", file=sys.stderr)
        raise SystemExit(130) from None
