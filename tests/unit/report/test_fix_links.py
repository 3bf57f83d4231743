"""A failed rule names the tasks that fix it (gpuboot.ids.link_report): in the JSON and text of
`gpuboot evaluate` (certify and scan link the same way), the HTML report and JUnit."""

from __future__ import annotations

import json

from gpuboot import cli, ids
from gpuboot.report import html, junit
from gpuboot.results import RunReport

from .sample import make_bundle

PINS = {"nvidia_driver_branch": "570", "nvidia_driver_version": "570.133.20-1"}


def _evaluate(tmp_path, capsys, *flags: str) -> str:
    # the sample's dpkg list has no nvidia-utils-570: STK-001 fails
    meta = {
        "profile": "hgx-h100-sxm-8gpu",
        "pins": {"gpuboot_profile": "hgx-h100-sxm-8gpu", **PINS},
    }
    bundle = make_bundle(tmp_path, ["gpu-a01"], meta=meta)
    assert cli.main(["evaluate", "--bundle", str(bundle), *flags]) == 1
    return capsys.readouterr().out


def test_evaluate_json_links_a_failed_rule_to_its_tasks(tmp_path, capsys):
    (node,) = json.loads(_evaluate(tmp_path, capsys, "--json"))["nodes"]
    found = {f["rule"]: f for f in node["findings"]}
    stk1 = found["STK-001"]
    assert stk1["status"] == "FAIL"
    assert stk1["fix_tasks"] == list(ids.fixes()["STK-001"])
    assert "REBOOT-010" in stk1["fix_tasks"]  # the reboot that loads the pinned module
    # a complete command: evaluate knows no inventory, the node is limited to
    assert stk1["remediate"] == "gpuboot install -i INVENTORY --limit gpu-a01 --tags STK-001"
    assert found["THR-001"]["status"] == "WARN" and found["THR-001"]["fix_tasks"] == []
    errors = [f for f in node["findings"] if f["status"] == "ERROR"]
    assert errors and not any("fix_tasks" in f for f in errors)  # the harness, not the node


def test_evaluate_text_says_how_to_remediate_with_a_complete_command(tmp_path, capsys):
    out = _evaluate(tmp_path, capsys)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("remediate STK-001"))
    assert line.strip().startswith("remediate STK-001 (tasks ")
    # evaluate knows no inventory: the operator names theirs; the node is limited to
    assert line.endswith(": gpuboot install -i INVENTORY --limit gpu-a01 --tags STK-001")


def _report() -> dict:
    finding = {"rule": "STK-002", "title": "pinned", "status": "FAIL", "reason": "not held: x"}
    return ids.link_report(
        RunReport.from_dict(
            {"run_id": "r1", "nodes": [{"host": "n1", "verdict": "FAIL", "findings": [finding]}]}
        )
    ).to_dict()


def test_html_and_junit_show_the_remediation():
    report = _report()
    command = report["nodes"][0]["findings"][0]["remediate"]
    assert command == "gpuboot install -i INVENTORY --limit n1 --tags STK-002"
    page = html.render(RunReport.from_dict(report))
    assert "<b>Remediate:</b>" in page and html._e(command) in page
    assert f"remediate: {command}" in junit.render(RunReport.from_dict(report)).decode()
