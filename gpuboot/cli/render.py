"""Human text of the verbs' results (tables and lines); pure: the boundary prints it."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from gpuboot.ui import host_ranges, printable, table
from gpuboot.verdict import PARTIAL, Status

if TYPE_CHECKING:
    from gpuboot.checks.base import Finding
    from gpuboot.results import BundleReport, NodeReport, RunReport


# ---------------------------------------------------------------- install
def install_text(result, args) -> str:
    rollout = result.rollout
    if not result.hosts:
        return f"nothing to resume: every host of run {result.resumed_from} converged"
    from gpuboot.ui import host_table

    # failures first, identical results folded; fitted to the terminal (--json: whole)
    text = host_table(result.hosts, lambda h, rows: fit_table(h, rows, terminal_width()))
    batches = -(-len(rollout.hosts) // rollout.batch_size)
    text += (
        f"\n{len(result.hosts)} host(s) in {batches} batch(es), {result.elapsed_s:.1f}s;"
        f" run dir {result.run_dir}"
    )
    for d in result.drained.values():
        if d.error:
            what = d.error
        elif not d.member:
            what = "not in the cluster: nothing to drain"
        else:
            what = f"cordoned and drained ({len(d.evicted)} pod(s) evicted); back after certify"
        text += f"\nk8s {d.node}: {what}"
    if result.would_drain:
        text += f"\nwould cordon and drain (stack changes): {', '.join(result.would_drain)}"
    if rollout.stopped:
        text += f"\nrollout stopped: {rollout.stopped}"
    if rollout.failed or rollout.pending or rollout.unknown:
        from gpuboot.rollout import Settings, resume_command

        again = (  # a dry run is re-run as a dry run: its hint must never change a node
            Settings.from_record(rollout.settings).command(args.inventory, check=True)
            if rollout.check
            else resume_command(args.inventory, result.run_id)
        )
        text += f"\nonce fixed: {again}"
    if result.diff is not None:  # --diff: the differences per change set, then the table
        from gpuboot import diffview

        text = (
            f"{diffview.render(result.diff, check=args.check)}\n\n{text}\n"
            f"{diffview.summary(result.diff, check=args.check)}; "
            f"whole diff: {result.run_dir / diffview.FILE_NAME}"
        )
    return text


# ---------------------------------------------------------------- matrix / runs
def stacks_table(rows: list[dict[str, Any]]) -> str:
    return table(
        ("stack", "driver", "cuda", "doca-ofed", "profiles", "violations"),
        [
            (
                r["stack"],
                r["driver"],
                r["cuda"],
                r["doca_ofed"] or "-",
                ",".join(r["profiles"]),
                r["violations"],
            )
            for r in rows
        ],
    )


def stack_text(doc: dict[str, Any]) -> str:
    return f"{doc['stack']}: {doc['description']}\n" + table(
        ("component", "version", "packages"),
        [
            (
                c["component"],
                c["version"] if c["enabled"] else "(disabled)",
                " ".join(c["packages"]),
            )
            for c in doc["components"]
        ],
    )


def violations_text(doc: dict[str, Any]) -> str:
    if not doc["violations"]:
        profiles = ", ".join(p or "any profile" for p in doc["profiles"])
        return f"{doc['stack']}: compatible with {profiles}"
    text = "\n".join(
        f"{v['rule']} {v['where']}: {v['message']}\n    fix: {v['fix']}\n    source: {v['source']}"
        for v in doc["violations"]
    )
    if doc["rules_not_checked"]:
        text += (
            "\ncompatibility rules not checked (not judged: each needs a value with a schema "
            f"fault): {', '.join(doc['rules_not_checked'])}"
        )
    return text


def runs_table(found) -> str:
    from gpuboot.runs import human_size

    rows = [
        (
            r.id,
            r.verb,
            human_size(r.size),
            "in progress" if r.in_progress else ("newest" if r.newest else ""),
        )
        for r in found
    ]
    total = human_size(sum(r.size for r in found))
    return table(("run", "verb", "size", "state"), rows) + f"\n{len(found)} run(s), {total}"


def prune_text(doc: dict[str, Any], *, dry_run: bool) -> str:
    from gpuboot.runs import human_size

    verb = "would free" if dry_run else "freed"
    done = "would remove" if dry_run else "removed"
    lines = [f"{done} {r['id']}" for r in doc["removed"]]
    lines += [f"kept {k['id']}: {k['why']}" for k in doc["kept"] if k["why"] == "in progress"]
    lines.append(
        f"{verb} {human_size(doc['freed_bytes'])} in {len(doc['removed'])} run(s);"
        f" {len(doc['kept'])} kept in {doc['root']}"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------- verdicts
def _not_passed(node: NodeReport) -> list[Finding]:
    """Findings judged other than PASS, the verdict's own first (SKIPPED ones did not run)."""
    judged = [f for f in node.findings if f.status not in (Status.PASS, Status.SKIPPED)]
    return sorted(judged, key=lambda f: f.status != node.verdict)


def _checks_summary(node: NodeReport) -> str:
    statuses = [f.status for f in node.findings]
    passed, skipped = statuses.count(Status.PASS), statuses.count(Status.SKIPPED)
    if not passed and node.verdict == Status.ERROR:
        return f"nothing was checked: {skipped} check(s) skipped"
    return f"{passed} passed, {skipped} skipped" if skipped else f"{passed} checks passed"


def _by_reason(findings: list[Finding]) -> dict[tuple[str, str], list[str]]:
    """(status, reason) -> the rules (with their titles when alone) that share it: a node
    whose evidence could not be read says so once, not once per rule."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.status, f.reason), []).append(f)
    return {
        key: [f"{fs[0].rule} {fs[0].title}"] if len(fs) == 1 else [f.rule for f in fs]
        for key, fs in groups.items()
    }


def _on(hosts: list[str], named: int) -> str:
    return ", ".join(hosts) if len(hosts) <= named else f"{len(hosts)} nodes"


def _skipped_text(nodes: tuple[NodeReport, ...], named: int = 5) -> str:
    """Checks that did not run, once per rule and reason with the nodes they concern: the
    same skip on 300 nodes is one line, not 300."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for node in nodes:
        for f in node.findings:
            if f.status == Status.SKIPPED:
                groups.setdefault((f.rule, f.title, f.reason), []).append(node.host)
    return "".join(
        f"\n  SKIPPED {rule} {title}: {reason} ({_on(hosts, named)})"
        for (rule, title, reason), hosts in groups.items()
    )


def _remediate_text(nodes: tuple[NodeReport, ...], inventory: str | None) -> str:
    """Per failed rule that tasks make true (ids.link_report linked it to the findings), the
    complete install that runs them alone on the nodes it failed on."""
    from gpuboot.report.ticket import fix_commands

    return "".join(
        f"\n  remediate {fix['rule']} (tasks {', '.join(fix['tasks'])}) on {fix['on']}: "
        f"{fix['command']}"
        for fix in fix_commands(nodes, inventory)
    )


# ---------------------------------------------------------------- width
MIN_WIDTH = 80


def terminal_width() -> int | None:
    """The terminal's columns (COLUMNS first, at least MIN_WIDTH); None when stdout is no
    terminal and COLUMNS is unset: a log or a pipe keeps every cell whole."""
    import os
    import sys

    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit():
        return max(MIN_WIDTH, int(cols))
    try:
        return max(MIN_WIDTH, os.get_terminal_size(sys.stdout.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        return None


def fit_table(headers, rows, width: int | None) -> str:
    """ui.table within ``width`` columns: the widest columns are cut to one cap, their cells
    ending in "…" (--json keeps the full text); the first column (the node) is cut last."""
    from gpuboot.ui import clip

    cells = [[printable("" if c is None else str(c), one_line=True) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    gaps = 2 * (len(headers) - 1)
    if width is None or sum(widths) + gaps <= width:
        return table(headers, cells)
    keep = widths[0] if widths[0] + gaps + sum(map(len, headers[1:])) <= width else 0
    rest = widths[1:] if keep else widths
    cap = max(rest)
    while cap > 1 and keep + sum(min(w, cap) for w in rest) + gaps > width:
        cap -= 1
    limits = [max(min(w, cap), len(h)) for w, h in zip(widths, headers, strict=True)]
    if keep:
        limits[0] = keep
    return table(headers, [[clip(c, limits[i]) for i, c in enumerate(r)] for r in cells])


def wants_markdown(args) -> bool:
    return getattr(args, "format", None) == "markdown"


def table_text(args, headers, rows) -> str:
    """A verb's table: Markdown under --format markdown, else capped to the terminal."""
    if wants_markdown(args):
        from gpuboot.report.ticket import markdown_table

        return markdown_table(headers, rows)
    return fit_table(headers, rows, terminal_width())


def verdict_text(report: RunReport | BundleReport, args=None, partial: Collection[str] = ()) -> str:
    """Failing nodes first, one row each with their first failed check; passing nodes with
    identical results folded into one row; then the other failed checks, the remediations
    (complete commands: ``args.inventory``), the skipped checks and the one-line fleet
    summary. Long per-link reasons are folded and the table fits the terminal (--json
    keeps every reason whole). ``args.format`` markdown: the run as Markdown. ``partial``:
    passing hosts whose certificate is partial and not accepted, shown PARTIAL."""
    from gpuboot.report._util import host_key
    from gpuboot.report.fold import fold_reason
    from gpuboot.report.ticket import fleet_line, shown_verdict, verdict_markdown

    inventory = getattr(args, "inventory", None)
    if wants_markdown(args):
        verb = f"gpuboot {getattr(args, 'verb', '')}"
        return verdict_markdown(report, inventory, verb=verb, partial=partial)
    rows, passed = [], {}
    # failures first; PASS nodes folded below
    order = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2, PARTIAL: 3}
    shown = {n.host: shown_verdict(n, partial) for n in report.nodes}
    for node in sorted(report.nodes, key=lambda n: (order.get(shown[n.host], 4), host_key(n.host))):
        bad = _not_passed(node)
        if not bad and shown[node.host] == Status.PASS:
            passed.setdefault(_checks_summary(node), []).append(node.host)
            continue
        first = bad[0] if bad else None
        rows.append(
            (
                node.host,
                shown[node.host],
                f"{first.rule} {first.title}" if first else "",
                fold_reason(first.reason) if first else _checks_summary(node),
            )
        )
    for summary, hosts in passed.items():  # identical results: one row ("node[1-37]")
        count = f"{len(hosts)} nodes: " if len(hosts) > 1 else ""
        rows.append((host_ranges(hosts), Status.PASS, "", count + summary))
    text = fit_table(("node", "verdict", "failed check", "reason"), rows, terminal_width())
    for node in report.nodes:
        host = printable(node.host, one_line=True)
        for (status, reason), rules_ in _by_reason(_not_passed(node)[1:]).items():
            what = " ".join(rules_) if len(rules_) > 1 else f"{rules_[0]}"
            text += f"\n  {host}: {status} {what}: {fold_reason(reason)}"
    text += _remediate_text(report.nodes, inventory)
    text += _skipped_text(report.nodes)
    if report.bundle:
        text += f"\nevidence bundle: {report.bundle}"
    return text + f"\n{fleet_line(report.nodes, partial)}"


def calibration_text(calibration: dict[str, Any]) -> str:
    text = (
        f"\ncalibration: {len(calibration['gpuboot_thresholds'])} figure(s) from "
        f"{len(calibration['healthy_nodes'])} node(s) -> {calibration['file']}"
    )
    for figure, why in calibration["skipped"].items():
        text += f"\n  {figure} not calibrated: {why}"
    return text


def gate_text(actions) -> str:
    """One line per node the Kubernetes join gate looked at."""
    text = ""
    for a in actions:
        missing = "not in the cluster" if a.missing else None
        what = a.error or missing or a.held or "; ".join(a.changes) or "no change"
        text += f"\nk8s {a.node}: {what}"
    return text
