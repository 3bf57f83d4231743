"""Summaries to paste into a ticket or a chat: the one-line fleet summary, the complete
command that fixes each failed rule, a node's summary block (verdict, GPU serials and
slots, Xids, action, bundle) and Markdown tables. Pure: the CLI prints them."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuboot.report.fold import fold_reason
from gpuboot.verdict import PARTIAL, UNKNOWN, Status

if TYPE_CHECKING:
    from gpuboot.results import BundleReport, NodeReport, RunReport

ORDER = (Status.FAIL, Status.ERROR, UNKNOWN, Status.WARN, Status.PASS)  # the worst first
# as the fleet line counts; PARTIAL: passed its checks, certificate partial, not accepted;
# UNKNOWN: its executor was lost, not judged
COUNTED = (Status.PASS, PARTIAL, Status.FAIL, Status.ERROR, UNKNOWN, Status.WARN)
NAMED = 5  # nodes the fleet line names before "and N more"
BLOCKS = 20  # node blocks in Markdown before the rest is left to --json
XID_RULES = ("XID-001", "XID-002")


def _rank(node: NodeReport) -> tuple[int, Any]:
    from gpuboot.report._util import host_key

    order = ORDER.index(node.verdict) if node.verdict in ORDER else len(ORDER)
    return order, host_key(node.host)


def not_passed(nodes: Iterable[NodeReport]) -> list[NodeReport]:
    return sorted((n for n in nodes if n.verdict != Status.PASS), key=_rank)


def first_problem(node: NodeReport):
    """The finding that gives the node its verdict (else the first not passed)."""
    judged = [f for f in node.findings if f.status not in (Status.PASS, Status.SKIPPED)]
    return next((f for f in judged if f.status == node.verdict), judged[0] if judged else None)


def shown_verdict(node: NodeReport, partial: Collection[str] = ()) -> str:
    """The node's verdict as a reader sees it: a PASS whose certificate is partial with a
    gap its policy does not accept (``partial``: those hosts) is PARTIAL, not PASS."""
    return PARTIAL if node.verdict == Status.PASS and node.host in partial else node.verdict


def fleet_line(nodes: Sequence[NodeReport], partial: Collection[str] = ()) -> str:
    """ "128 nodes: 126 PASS, 2 FAIL — node7 XID-001 RMA, node9 NVL-001": the counts by
    verdict, then the nodes not passed (failing first) with their rule and action, then
    the partial ones."""
    shown = [shown_verdict(n, partial) for n in nodes]
    counts = [(v, shown.count(v)) for v in COUNTED]
    text = f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}: " + ", ".join(
        f"{c} {v}" for v, c in counts if c
    )
    bad = not_passed(nodes)
    bad += [n for n in nodes if shown_verdict(n, partial) == PARTIAL]
    if not bad:
        return text
    named = []
    for node in bad[:NAMED]:
        first = None if node.verdict == Status.PASS else first_problem(node)
        named.append(
            " ".join(
                [
                    node.host,
                    *([first.rule] if first else []),
                    *([PARTIAL] if node.verdict == Status.PASS else []),
                    *(["RMA"] if node.escalations else []),
                ]
            )
        )
    more = f", … {len(bad) - NAMED} more" if len(bad) > NAMED else ""
    return f"{text} — {', '.join(named)}{more}"


def fix_commands(nodes: Sequence[NodeReport], inventory: str | None) -> list[dict[str, Any]]:
    """Per rule that tasks make true, the install that runs them on the nodes it failed on:
    a complete command (``-i`` and ``--limit``; evaluate knows no inventory: INVENTORY)."""
    from gpuboot.ids import remediation
    from gpuboot.ui import host_ranges

    groups: dict[str, tuple[list[str], list[str]]] = {}
    for node in nodes:
        for f in node.findings:
            tasks = node.remedy(f).get("fix_tasks")
            if tasks:
                hosts = groups.setdefault(f.rule, (list(tasks), []))[1]
                if node.host not in hosts:
                    hosts.append(node.host)
    return [
        {
            "rule": rule,
            "tasks": tasks,
            "hosts": hosts,
            "on": host_ranges(hosts),
            # the one spelling of the command (ids.remediation), --limit every node at once
            "command": remediation(rule, ",".join(hosts), inventory)["remediate"],
        }
        for rule, (tasks, hosts) in groups.items()
    ]


def node_facts(node: NodeReport, bundle: Path | str | None) -> dict[str, Any]:
    """What a ticket about the node needs: verdict and the checks behind it (reasons
    folded), each GPU's slot and serial (from its evidence), Xids, the action, the bundle."""
    facts: dict[str, Any] = {"host": node.host, "verdict": node.verdict}
    groups: dict[tuple[str, str], list[Any]] = {}  # one reason on 30 rules: one line
    for f in node.findings:
        if f.status not in (Status.PASS, Status.SKIPPED):
            groups.setdefault((f.status, fold_reason(f.reason)), []).append(f)
    facts["problems"] = [
        f"{status} {fs[0].rule} {fs[0].title}: {reason}"
        if len(fs) == 1
        else f"{status} {' '.join(f.rule for f in fs)}: {reason}"
        for (status, reason), fs in sorted(groups.items(), key=lambda g: g[0][0] != node.verdict)
    ]
    facts["gpus"] = _gpus(Path(bundle) / node.host) if bundle else []
    facts["xids"] = [
        fold_reason(f.reason)
        for f in node.findings
        if f.rule in XID_RULES and f.status in (Status.FAIL, Status.WARN)
    ]
    first = first_problem(node)
    facts["action"] = node.recommended_action or (first.action if first else "") or ""
    facts["escalations"] = [e.fault for e in node.escalations or ()]
    d = node.drift
    facts["drift"] = (
        None
        if d is None
        else "; ".join(
            [f"since {d.previous_scan}" if d.previous_scan else "first scan"]
            + [
                f"{k}: {' '.join(getattr(d, k))}"
                for k in ("new", "still", "cleared")
                if getattr(d, k)
            ]
            + ([f"not judged: {' '.join(node.unjudged)}"] if node.unjudged else [])
        )
    )
    facts["bundle"] = str(Path(bundle) / node.host) if bundle else None
    return facts


def _gpus(host_dir: Path) -> list[str]:
    """ "0000:18:00.0 serial 1654922001234" per GPU its evidence names; none if unreadable."""
    from gpuboot.report.fingerprint import host_fingerprint

    try:
        gpus = host_fingerprint(host_dir).get("gpus") or []
    except OSError:  # the bundle moved or was pruned since the run: nothing to name
        return []
    return [f"{g.get('pci_bus_id') or '?'} serial {g.get('serial') or '?'}" for g in gpus]


def _cell(value: object) -> str:
    from gpuboot.ui import printable

    text = printable("" if value is None else str(value), one_line=True)
    return text.replace("|", "\\|")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = [
        "| " + " | ".join(_cell(h) for h in headers) + " |",
        "|" + "---|" * len(headers),
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _code(text: str) -> str:
    quoted = text.replace("`", "'")
    return f"`{quoted}`"


def node_block(facts: dict[str, Any], fixes: list[dict[str, Any]]) -> str:
    lines = [f"#### {_cell(facts['host'])}: {facts['verdict']}"]
    lines += [f"- {_cell(p)}" for p in facts["problems"]]
    if facts["drift"]:
        lines.append(f"- drift: {_cell(facts['drift'])}")
    if facts["gpus"]:
        lines.append(f"- GPUs (slot, serial): {_cell('; '.join(facts['gpus']))}")
    if facts["xids"]:
        lines.append(f"- Xid: {_cell('; '.join(facts['xids']))}")
    if facts["escalations"]:
        lines.append(f"- escalated: {_cell(', '.join(facts['escalations']))}")
    if facts["action"]:
        lines.append(f"- action: {_cell(facts['action'])}")
    for fix in fixes:
        if facts["host"] in fix["hosts"]:
            lines.append(f"- fix {fix['rule']}: {_code(fix['command'])}")
    if facts["bundle"]:
        lines.append(f"- bundle: {_code(facts['bundle'])}")
    return "\n".join(lines)


def verdict_markdown(
    report: RunReport | BundleReport,
    inventory: str | None,
    *,
    verb: str = "gpuboot",
    partial: Collection[str] = (),
) -> str:
    """The run as Markdown: the fleet line, the table of nodes (passing ones folded), one
    block per node not passed (the first BLOCKS), the fix commands, the bundle.
    ``partial``: passing hosts whose certificate is partial and not accepted."""
    from gpuboot.ui import host_ranges

    bundle = report.bundle
    fixes = fix_commands(report.nodes, inventory)
    rows = []
    for node in not_passed(report.nodes):
        first = first_problem(node)
        rows.append(
            (
                node.host,
                node.verdict,
                f"{first.rule} {first.title}" if first else "",
                fold_reason(first.reason) if first else "",
            )
        )
    for verdict in (PARTIAL, Status.PASS):
        hosts = [n.host for n in report.nodes if shown_verdict(n, partial) == verdict]
        if hosts:
            rows.append((host_ranges(hosts), verdict, "", f"{len(hosts)} node(s)"))
    parts = [
        f"**{verb}**: {fleet_line(report.nodes, partial)}",
        markdown_table(("node", "verdict", "first problem", "reason"), rows),
    ]
    bad = not_passed(report.nodes)
    parts += [node_block(node_facts(n, bundle), fixes) for n in bad[:BLOCKS]]
    if len(bad) > BLOCKS:
        parts.append(f"… {len(bad) - BLOCKS} more node(s) not passed: `--json` lists them all")
    if fixes:
        parts.append(
            "Fix (the tasks that make each rule true, on its nodes):\n\n```sh\n"
            + "\n".join(f["command"] for f in fixes)
            + "\n```"
        )
    if bundle:
        parts.append(f"Evidence bundle: {_code(str(bundle))}")
    return "\n\n".join(parts) + "\n"
