"""What the ladder reads: a failing node's fault (the Xid catalogue's bucket, the GPU, a
reconcilable rule, an escalation) and its past steps from the remediation history and the
node's bounded actions annotation."""

from __future__ import annotations

import json

import pytest

from gpuboot.k8s import labels as L
from gpuboot.remediate import ladder as LD
from gpuboot.remediate import record
from gpuboot.remediate.fault import fault_of
from gpuboot.results import NodeReport

DMESG = "[    0.000000] Linux version 6.1.0-27-amd64\n{}\n"
XID = "[ 12.5] NVRM: Xid (PCI:0000:{bus}:00): {code}, pid='<unknown>', name=<unknown>, {text}"


def _node(host: str, verdict: str, *rules: str, escalated: str | None = None) -> NodeReport:
    findings = [
        {"rule": r, "title": r, "status": verdict, "reason": "r", "action": "a"} for r in rules
    ]
    doc = {"host": host, "verdict": verdict, "findings": findings, "measurements": []}
    if escalated:
        esc = {"fault": escalated, "what": "w", "rule": "XID-001", "boots": 3}
        doc["escalations"] = [{**esc, "first_seen": None, "action": "RMA", "new": True}]
    return NodeReport.from_dict(doc)


def _bundle(tmp_path, host: str, *lines: str):
    (tmp_path / host).mkdir(parents=True)
    (tmp_path / host / "dmesg.txt").write_text(DMESG.format("\n".join(lines)))
    return tmp_path


def test_an_xid_79_asks_for_a_reboot_keyed_by_its_gpu(tmp_path):
    line = XID.format(bus="3b", code=79, text="GPU has fallen off the bus.")
    fault = fault_of(_node("n1", "FAIL", "XID-001"), _bundle(tmp_path, "n1", line))
    assert fault.key == "xid:79@0000:3b:00" and fault.bucket == "RESTART_BM"
    assert fault.gpus == () and not fault.escalated
    assert LD.applicable(fault) == ["reboot", "reinstall", "quarantine"]


def test_a_reset_xid_names_the_gpu_to_reset(tmp_path):
    line = XID.format(bus="3b", code=95, text="Uncontained: FBHUB. RST: Yes, D-RST: No")
    fault = fault_of(_node("n1", "FAIL", "XID-001"), _bundle(tmp_path, "n1", line))
    assert fault.bucket == "RESET_GPU" and fault.gpus == ("0000:3b:00.0",)


def test_a_failing_rule_with_fixing_tasks_is_reconciled_first():
    fault = fault_of(_node("n1", "FAIL", "STK-002"), None)
    assert fault.key == "rules:STK-002" and fault.drifted and fault.bucket is None
    assert LD.applicable(fault)[0] == "reconcile"


def test_an_escalated_fault_is_marked(tmp_path):
    line = XID.format(bus="3b", code=79, text="GPU has fallen off the bus.")
    node = _node("n1", "FAIL", "XID-001", escalated="xid:79@0000:3b:00")
    assert fault_of(node, _bundle(tmp_path, "n1", line)).escalated


def test_error_and_pass_are_no_fault():
    assert fault_of(_node("n1", "ERROR", "STK-001"), None) is None  # unknown is never bad
    assert fault_of(_node("n1", "PASS"), None) is None


def test_history_records_are_read_back_per_host_and_junk_is_skipped(tmp_path):
    h = tmp_path / "home" / record.HISTORY_NAME
    record.append(h, [{**record.entry("reboot", "passed", "f", at=100), "host": "n1"}])
    record.append(h, [{**record.entry("reset", "failed", "f", at=90), "host": "n2"}])
    with open(h, "a") as fh:
        fh.write('{"torn": \n[1, 2]\n{"host": "n1", "at": "soon", "step": "reboot"}\n')
    assert record.past_of("n1", record.read(h)) == [LD.Past(100.0, "reboot", "passed", "f")]
    assert oct(h.stat().st_mode & 0o777) == "0o600"
    assert record.read(tmp_path / "absent.jsonl") == []


def test_the_nodes_actions_annotation_is_read_and_a_hand_edit_is_none():
    actions = [{"at": 100, "step": "reboot", "result": "failed"}, {"step": "x"}]
    node = {"metadata": {"annotations": {L.ANNOTATION_ACTIONS: json.dumps(actions)}}}
    assert record.past_of_node(node) == [LD.Past(100.0, "reboot", "failed")]
    assert record.past_of_node({"metadata": {"annotations": {L.ANNOTATION_ACTIONS: "{bad"}}}) == []


def test_a_step_in_both_the_file_and_the_annotation_counts_once():
    a = [LD.Past(100.0, "reboot", "passed", "f")]
    b = [LD.Past(100.4, "reboot", "passed", ""), LD.Past(200.0, "reinstall", "failed", "f")]
    assert [p.step for p in record.merged(a, b)] == ["reboot", "reinstall"]


def test_a_deep_line_is_skipped_and_a_fifo_history_refused(tmp_path):
    import os

    from gpuboot.errors import GpubootError

    h = tmp_path / record.HISTORY_NAME
    record.append(h, [{**record.entry("reboot", "passed", "f", at=100), "host": "n1"}])
    with open(h, "a") as fh:
        fh.write("[" * 5000 + "]" * 5000 + "\n")
    assert [r["host"] for r in record.read(h)] == ["n1"]
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(GpubootError, match="not a regular file"):
        record.read(fifo)
