"""Output to paste into a ticket: the one-line fleet summary, complete fix commands, each
node's block in Markdown (verdict, GPU slots and serials, Xids, action, bundle), and the
terminal table fitted to its width."""

from __future__ import annotations

import json

import pytest

from gpuboot import cli, ids
from gpuboot.cli import render
from gpuboot.report import ticket
from gpuboot.results import Escalation, RunReport

from .sample import make_bundle

PINS = {"nvidia_driver_branch": "570", "nvidia_driver_version": "570.133.20-1"}


def _node(host, verdict, rule="GPU-001", reason="r"):
    finding = {"rule": rule, "title": "t", "status": verdict, "reason": reason}
    return {"host": host, "verdict": verdict, "findings": [finding] if verdict != "PASS" else []}


def _fleet(n=128):
    nodes = [_node(f"node{i}", "PASS") for i in range(1, n + 1)]
    nodes[6] = _node("node7", "FAIL", "XID-001", "Xid 79 on GPU 0000:18:00.0")
    nodes[8] = _node("node9", "FAIL", "NVL-001", "GPU 1: all NVLinks inactive")
    return RunReport.from_dict({"nodes": nodes})


def test_fleet_line_counts_and_names_the_failing_nodes_with_rule_and_action():
    from dataclasses import replace

    report = _fleet()
    rma = Escalation("xid:79@0000:18:00", "Xid 79", "XID-001", 2, None, "RMA", True)
    nodes = tuple(replace(n, escalations=(rma,)) if n.host == "node7" else n for n in report.nodes)
    assert (
        ticket.fleet_line(nodes) == "128 nodes: 126 PASS, 2 FAIL — node7 XID-001 RMA, node9 NVL-001"
    )


def test_fleet_line_names_five_then_counts_the_rest():
    nodes = [_node(f"n{i}", "FAIL") for i in range(1, 9)] + [_node("n9", "ERROR")]
    line = ticket.fleet_line(RunReport.from_dict({"nodes": nodes}).nodes)
    assert line.startswith("9 nodes: 8 FAIL, 1 ERROR — n1 GPU-001, n2 GPU-001")
    assert line.endswith("n5 GPU-001, … 4 more")


def test_fix_commands_are_complete_with_inventory_and_limit():
    report = ids.link_report(
        RunReport.from_dict(
            {"nodes": [_node("node7", "FAIL", "STK-002"), _node("node9", "FAIL", "STK-002")]}
        )
    )
    (fix,) = ticket.fix_commands(report.nodes, "/srv/inv ventory.yml")
    assert fix["command"] == (
        "gpuboot install -i '/srv/inv ventory.yml' --limit node7,node9 --tags STK-002"
    )
    assert fix["on"] == "node[7,9]" and fix["tasks"] == list(ids.fixes()["STK-002"])


def _bundle(tmp_path):
    meta = {
        "profile": "hgx-h100-sxm-8gpu",
        "pins": {"gpuboot_profile": "hgx-h100-sxm-8gpu", **PINS},
    }
    return make_bundle(tmp_path, ["gpu-a01", "gpu-a02"], meta=meta)


def test_evaluate_as_markdown_is_a_ticket(tmp_path, capsys):
    bundle = _bundle(tmp_path)
    assert cli.main(["evaluate", "--bundle", str(bundle), "--format", "markdown"]) == 1
    md = capsys.readouterr().out
    assert md.startswith("**gpuboot evaluate**: 2 nodes: 2 FAIL — gpu-a01 STK-001, gpu-a02 STK-001")
    assert (
        "| node | verdict | first problem | reason |\n|---|---|---|---|\n| gpu-a01 | FAIL |" in md
    )
    block = md[md.index("#### gpu-a01: FAIL") :].split("\n\n")[0].splitlines()
    assert any(line.startswith("- FAIL STK-001 ") for line in block)
    assert any(line.startswith("- GPUs (slot, serial): ") and "serial" in line for line in block)
    assert f"- bundle: `{bundle / 'gpu-a01'}`" in block
    assert (
        "- fix STK-001: `gpuboot install -i INVENTORY --limit gpu-a01,gpu-a02 --tags STK-001`"
        in block
    )
    assert "```sh\ngpuboot install -i INVENTORY --limit gpu-a01,gpu-a02 --tags STK-001" in md


def test_markdown_escapes_table_pipes_and_terminal_controls():
    row = ("n|1", "FAIL", "x", "a\x1b[31m|b")
    table = ticket.markdown_table(("h",) * 4, [row])
    assert "n\\|1" in table and "\\x1b[31m\\|b" in table and "\x1b" not in table


@pytest.mark.parametrize("columns", ["80", "120"])
def test_the_table_fits_the_terminal_and_json_keeps_every_reason(
    tmp_path, capsys, monkeypatch, columns
):
    monkeypatch.setenv("COLUMNS", columns)
    bundle = _bundle(tmp_path)
    assert cli.main(["evaluate", "--bundle", str(bundle)]) == 1
    lines = capsys.readouterr().out.splitlines()
    table = lines[: lines.index(next(ln for ln in lines if ln.startswith("  ")))]
    assert max(len(line) for line in table) <= int(columns)
    assert any(line.endswith("…") for line in table)  # a long reason was cut
    assert cli.main(["evaluate", "--bundle", str(bundle), "--json"]) == 1
    reasons = [
        f["reason"] for n in json.loads(capsys.readouterr().out)["nodes"] for f in n["findings"]
    ]
    assert max(len(r) for r in reasons) > int(columns)  # whole in --json


def test_fit_table_cuts_the_widest_columns_only():
    rows = [("node1", "FAIL", "x" * 200)]
    text = render.fit_table(("node", "verdict", "reason"), rows, 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert text.splitlines()[2].startswith("node1  FAIL     xxx") and text.endswith("…")
    assert render.fit_table(("a",), [("b" * 200,)], None).endswith("b")  # no terminal: whole


def test_a_partial_node_not_accepted_reads_partial_never_pass_in_table_line_and_markdown():
    report = RunReport.from_dict({"nodes": [_node(f"node{i}", "PASS") for i in range(1, 5)]})
    text = render.verdict_text(report, partial={"node3"})
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()[2:6] if line.strip()}
    assert rows.get("node3") == "PARTIAL", text
    assert text.rstrip().endswith("4 nodes: 3 PASS, 1 PARTIAL — node3 PARTIAL"), text
    markdown = ticket.verdict_markdown(report, None, partial={"node3"})
    assert "| node3 | PARTIAL |" in markdown and "3 PASS, 1 PARTIAL" in markdown, markdown
    assert "PARTIAL" not in render.verdict_text(report)  # accepted or no certificate asked


def test_fit_table_keeps_the_node_column_whole_while_the_others_can_give():
    rows = [("h100-pcie-bridge-naive-profile", "FAIL", "y" * 60, "x" * 200)]
    lines = render.fit_table(("node", "verdict", "check", "reason"), rows, 80).splitlines()
    assert lines[2].startswith("h100-pcie-bridge-naive-profile  FAIL ")
    assert all(len(line) <= 80 for line in lines)


def test_a_nodes_block_tells_one_reason_once_for_the_rules_that_share_it():
    findings = [
        {"rule": "NVL-001", "title": "NVLinks", "status": "FAIL", "reason": "GPU 6: all down"},
        *({"rule": r, "title": "t", "status": "ERROR", "reason": "not judged: partial"}
          for r in ("STK-001", "GPU-001")),
    ]  # fmt: skip
    (node,) = RunReport.from_dict(
        {"nodes": [{"host": "n", "verdict": "FAIL", "findings": findings}]}
    ).nodes
    assert ticket.node_facts(node, None)["problems"] == [
        "FAIL NVL-001 NVLinks: GPU 6: all down",
        "ERROR STK-001 GPU-001: not judged: partial",
    ]


def test_a_node_whose_executor_was_lost_is_counted_unknown_in_line_metrics_and_html():
    from datetime import UTC, datetime

    from gpuboot.report import html, prometheus

    nodes = [
        _node("a1", "PASS"),
        _node("a2", "UNKNOWN", "GPU-001", "not judged: executor ex1 lost"),
    ]
    report = RunReport.from_dict({"nodes": nodes})
    assert ticket.fleet_line(report.nodes).startswith("2 nodes: 1 PASS, 1 UNKNOWN — a2")
    metrics = prometheus.render(report, {}, now=datetime(2026, 11, 27, tzinfo=UTC))
    assert 'gpuboot_certify_node_verdict{host="a2",verdict="UNKNOWN"} 1' in metrics
    assert 'gpuboot_certify_node_verdict{host="a1",verdict="UNKNOWN"} 0' in metrics
    page = html.render(report, {}, now=datetime(2026, 11, 27, tzinfo=UTC))
    assert '<div class="card s-UNKNOWN"><div class="n">1</div>' in page
