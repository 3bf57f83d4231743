"""run_ladder with the node-side steps replaced (no host is reached): --dry-run touches
nothing, ERROR is never remediated, each step and its certify is recorded and read back
by the next run (the same fault climbs), and on a cluster (the fake API) the disruption
gate and another tool's marker hold a step back while the node's labels and bounded
actions annotation follow the climb."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from gpuboot import certify
from gpuboot.k8s import labels as L
from gpuboot.remediate import ladder as LD
from gpuboot.remediate import plays, record
from gpuboot.remediate import run as R
from gpuboot.remediate import steps as S
from gpuboot.results import RunReport
from gpuboot.runner import HostResult
from gpuboot_lab.kubeapi import FakeApiServer, node

PINS = "{gpuboot_profile: hgx-h100-sxm-8gpu, nvidia_driver_branch: '550', nvidia_driver_version: 550.54.15-1}"  # noqa: E501
XID79 = (
    "[    0.000000] Linux version 6.1.0-27-amd64\n"
    "[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
)


def _inventory(tmp_path, hosts=("n1", "n2")):
    path = tmp_path / "inv.yml"
    body = "".join(f"    {h}: {{ansible_host: 192.0.2.{i + 1}}}\n" for i, h in enumerate(hosts))
    path.write_text(f"all:\n  vars: {PINS}\n  hosts:\n{body}")
    return path


def _report(tmp_path, verdicts: dict[str, str], reason: str = "r") -> RunReport:
    bundle = tmp_path / "bundle"
    nodes = []
    for host, verdict in verdicts.items():
        (bundle / host).mkdir(parents=True, exist_ok=True)
        if verdict == "FAIL":
            (bundle / host / "dmesg.txt").write_text(XID79)
        finding = {"rule": "XID-001", "title": "t", "status": verdict, "reason": reason}
        nodes.append({"host": host, "verdict": verdict, "findings": [finding]})
    return RunReport.from_dict({"run_id": "r1", "bundle": str(bundle), "nodes": nodes})


@pytest.fixture
def steps(guard, monkeypatch, tmp_path):
    """The reboot play and the certify after it, scripted: reboots asked, verdicts given."""
    done = {"reboots": [], "verdicts": []}

    def reboot(inv, host, reason):
        done["reboots"].append(host)
        return HostResult(host=host, ok=3, changed=1)

    def fake_certify(inv, *, limit=None, **_kw):
        verdict = done["verdicts"].pop(0)
        return _report(tmp_path / f"c{len(done['verdicts'])}", {limit: verdict})

    monkeypatch.setattr(plays, "reboot", reboot)
    monkeypatch.setattr(certify, "certify", fake_certify)
    monkeypatch.setattr(S, "CERTIFY_RETRY_S", 0.0)
    return done


def test_a_dry_run_shows_the_ladder_and_touches_nothing(guard, tmp_path):
    out = R.run_ladder(_inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), dry_run=True)
    (n1,) = out.nodes
    assert [s.step for s in n1.climb.steps] == ["reboot", "reinstall", "quarantine"]
    assert {s.result for s in n1.climb.steps} == {LD.WOULD} and out.exit_code == 0
    assert guard == [] and not record.default_history().exists()


def test_pass_and_error_nodes_are_not_remediated(guard, tmp_path):
    report = _report(tmp_path, {"n1": "PASS", "n2": "ERROR"})
    out = R.run_ladder(_inventory(tmp_path), report=report)
    assert out.nodes == [] and out.exit_code == 0 and guard == []


def test_a_reboot_that_certifies_ends_it_and_the_same_fault_later_climbs(
    steps, tmp_path, monkeypatch
):
    inv = _inventory(tmp_path)
    steps["verdicts"] = ["PASS"]
    first = R.run_ladder(inv, report=_report(tmp_path / "a", {"n1": "FAIL"}))
    assert [(s.step, s.result) for s in first.nodes[0].climb.steps] == [("reboot", "passed")]
    assert first.exit_code == 0 and steps["reboots"] == ["n1"]
    (rec,) = record.read(record.default_history())
    assert (rec["host"], rec["step"], rec["fault"]) == ("n1", "reboot", "xid:79@0000:3b:00")
    # the same fault back: reinstall (scripted to fail here), then quarantine
    calls = []
    steps["verdicts"] = ["FAIL"]
    monkeypatch.setattr(S.Steps, "_reinstall", lambda self: calls.append(self.host))
    second = R.run_ladder(inv, report=_report(tmp_path / "b", {"n1": "FAIL"}))
    got = [(s.step, s.result) for s in second.nodes[0].climb.steps]
    assert got == [("reinstall", "failed"), ("quarantine", "done")] and calls == ["n1"]
    assert second.exit_code == 1
    # quarantined: nothing more
    third = R.run_ladder(inv, report=_report(tmp_path / "c", {"n1": "FAIL"}))
    assert third.nodes[0].climb.skipped.startswith("quarantined")
    assert steps["reboots"] == ["n1"]


HELD_BY = (
    "node held by another gpuboot run: controller hall-b home ba9876543210 "
    "(run 20261127T130000-install-abcdef, taken 2026-11-27T13:00:00Z, ...)"
)


def test_another_controllers_node_lease_holds_the_reboot_back_without_climbing(
    steps, tmp_path, monkeypatch
):
    def refused(inv, host, reason):
        steps["reboots"].append(host)
        return HostResult(
            host=host, failed=1, failed_task="REM-000 | AUDIT | Take ...", reason=HELD_BY
        )

    monkeypatch.setattr(plays, "reboot", refused)
    monkeypatch.setattr(S.Steps, "_reinstall", lambda self: pytest.fail("climbed past a hold"))
    out = R.run_ladder(_inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}))
    (step,) = out.nodes[0].climb.steps
    assert (step.step, step.result) == ("reboot", LD.HELD)
    assert step.detail == f"not touched: {HELD_BY}" and out.exit_code == 1
    # the next run tries the reboot again: a held step was no action on the node
    past = record.past_of("n1", record.read(out.history))
    assert LD.plan(out.nodes[0].climb.fault, past, time.time() + 1)[0] == "reboot"


def test_another_controllers_node_lease_holds_a_reinstall_back(steps, tmp_path, monkeypatch):
    from gpuboot import install

    refused = HostResult(host="n1", failed=1, failed_task="INST-004 | AUDIT | Take ...",
                         reason=HELD_BY)  # fmt: skip
    monkeypatch.setattr(plays, "reboot", lambda *a: HostResult(host="n1", ok=1))
    monkeypatch.setattr(install, "install", lambda *a, **kw: SimpleNamespace(hosts={"n1": refused}))
    steps["verdicts"] = ["FAIL"]
    out = R.run_ladder(_inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}))
    got = [(s.step, s.result) for s in out.nodes[0].climb.steps]
    assert got == [("reboot", "failed"), ("reinstall", "held")]
    assert "hall-b" in out.nodes[0].climb.steps[-1].detail


def test_a_certify_that_cannot_judge_is_unknown_not_a_climb(steps, tmp_path):
    steps["verdicts"] = ["ERROR", "ERROR"]
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), certify_timeout_s=0.0
    )
    assert [(s.step, s.result) for s in out.nodes[0].climb.steps] == [("reboot", "unknown")]
    assert out.exit_code == 3


def test_a_certify_whose_executor_was_lost_is_unknown_at_once(steps, tmp_path):
    # its executor gone, certify cannot judge the node again soon: no retry loop until the
    # timeout (a second certify would pop a verdict that is not there)
    steps["verdicts"] = ["UNKNOWN"]
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), certify_timeout_s=3600.0
    )
    (step,) = out.nodes[0].climb.steps
    assert (step.step, step.result) == ("reboot", "unknown")
    assert "executor" in step.detail and steps["verdicts"] == []


@pytest.fixture
def api(tmp_path):
    server = FakeApiServer().start()
    server.kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield server
    finally:
        server.stop()


def test_on_a_cluster_each_step_is_marked_and_a_pass_clears_the_state(steps, api, tmp_path):
    api.add(node("n1"))
    api.add(node("n2"))
    steps["verdicts"] = ["PASS"]
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    (step,) = out.nodes[0].climb.steps
    assert (step.step, step.result) == ("reboot", "passed") and steps["reboots"] == ["n1"]
    assert "not returned to service without a signing key" in step.detail
    meta = api.nodes["n1"]["metadata"]
    assert L.LABEL_STATE not in meta["labels"]
    action = json.loads(meta["annotations"][L.ANNOTATION_ACTIONS])[-1]  # the drain's before
    assert (action["step"], action["result"]) == ("reboot", "passed")


def test_nvsentinel_stands_aside_during_a_step_and_gets_its_label_back(
    steps, api, tmp_path, monkeypatch
):
    managed = "k8saas.nvidia.com/ManagedByNVSentinel"
    api.add(node("n1", labels={managed: "true"}))
    api.add(node("n2"))
    during = []

    def reboot(inv, host, reason):
        during.append(api.nodes["n1"]["metadata"]["labels"].get(managed))
        return HostResult(host=host, ok=1)

    monkeypatch.setattr(plays, "reboot", reboot)
    steps["verdicts"] = ["PASS"]
    R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    assert during == ["false"]
    assert api.nodes["n1"]["metadata"]["labels"][managed] == "true"


def test_the_api_failing_after_a_step_keeps_its_result_and_says_what_is_left(
    steps, api, tmp_path, monkeypatch
):
    api.add(node("n1"))
    api.add(node("n2"))

    def reboot(inv, host, reason):
        api.inject(500, path="/api/v1/nodes/n1$", method="GET")  # the API goes down meanwhile
        return HostResult(host=host, ok=1)

    monkeypatch.setattr(plays, "reboot", reboot)
    steps["verdicts"] = ["FAIL"]
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    first = out.nodes[0].climb.steps[0]
    assert (first.step, first.result) == ("reboot", LD.FAILED)
    assert "then the API failed" in first.detail and "gpuboot node release n1" in first.detail
    # the next step finds the API down: nothing done, the climb stops there
    assert [(s.step, s.result) for s in out.nodes[0].climb.steps[1:]] == [("reinstall", LD.HELD)]


def test_the_disruption_gate_holds_a_step_back(steps, api, tmp_path):
    from gpuboot.k8s.budget import Limits

    api.add(node("n1"))
    api.add(node("n2", unschedulable=True))  # someone else's cordon: the one allowed out
    out = R.run_ladder(
        _inventory(tmp_path),
        report=_report(tmp_path, {"n1": "FAIL"}),
        kubeconfig=api.kubeconfig,
        limits=Limits(max_unavailable="1"),
    )
    (step,) = out.nodes[0].climb.steps
    assert step.result == LD.HELD and "disruption gate" in step.detail
    assert steps["reboots"] == [] and out.exit_code == 1
    assert L.ANNOTATION_ACTIONS not in api.nodes["n1"]["metadata"]["annotations"]


def test_another_remediators_lease_holds_the_step_back(steps, api, tmp_path):
    from datetime import UTC, datetime

    api.add(node("n1"))
    api.add(node("n2"))
    api.add_lease("medik8s-leases", "node-n1", "self-node-remediation",
                  renewed=datetime.now(UTC))  # fmt: skip
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    (step,) = out.nodes[0].climb.steps
    assert step.result == LD.HELD and "self-node-remediation" in step.detail
    assert steps["reboots"] == []


def test_a_host_the_cluster_does_not_know_is_remediated_outside_it(steps, api, tmp_path):
    api.add(node("n2"))
    steps["verdicts"] = ["PASS"]
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    assert [(s.step, s.result) for s in out.nodes[0].climb.steps] == [("reboot", "passed")]
    assert api.calls("PATCH") == [] and steps["reboots"] == ["n1"]


def test_an_unreadable_node_gets_nothing(steps, api, tmp_path):
    api.add(node("n1"))
    api.inject(500, path="/api/v1/nodes/n1$", method="GET")
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    assert out.nodes[0].climb.skipped.startswith("cannot read the node: API error 500")
    assert steps["reboots"] == []


def test_another_tools_node_is_skipped(steps, api, tmp_path):
    api.add(node("n1", labels={L.LABEL_MANAGED: "false"}))
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    assert out.nodes[0].climb.skipped.startswith("owned by another tool")
    assert steps["reboots"] == [] and api.calls("PATCH") == []


@pytest.mark.parametrize(
    "notes",
    [
        {L.ANNOTATION_CORDONED_BY: L.CORDONED_BY_US},  # uncordoned by a human just now
        {L.ANNOTATION_CANCELLED_AT: str(int(time.time()) - 60)},  # within the cool-down
    ],
)
def test_a_cancelled_node_is_left_alone_unless_its_fault_is_critical(steps, api, tmp_path, notes):
    api.add(node("n1", annotations=notes))
    api.add(node("n2"))
    inv = _inventory(tmp_path)
    out = R.run_ladder(inv, report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig)
    assert out.nodes[0].climb.skipped.startswith("cancelled by a human")
    assert steps["reboots"] == []
    steps["verdicts"] = ["PASS"]
    lost = _report(tmp_path / "b", {"n1": "FAIL"}, reason="Xid 79 on GPU 0000:3b:00.0")
    out = R.run_ladder(inv, report=lost, kubeconfig=api.kubeconfig)
    assert out.nodes[0].climb.skipped is None and steps["reboots"] == ["n1"]


def test_quarantine_on_a_cluster_labels_the_node_for_hardware_work(steps, api, tmp_path):
    api.add(node("n1"))
    api.add(node("n2"))
    for at in (1, 2, 3):  # three actions this week: the bound
        entry = record.entry("reboot", "passed", f"other{at}", at=time.time() - at)
        record.append(record.default_history(), [{**entry, "host": "n1"}])
    out = R.run_ladder(
        _inventory(tmp_path), report=_report(tmp_path, {"n1": "FAIL"}), kubeconfig=api.kubeconfig
    )
    (step,) = out.nodes[0].climb.steps
    assert step.step == "quarantine" and "3 actions within 7 days" in step.detail
    stored = api.nodes["n1"]
    assert stored["metadata"]["labels"][L.LABEL_STATE] == L.STATE_QUARANTINED
    assert stored["metadata"]["labels"][L.LABEL_ACTION] == L.QUARANTINE_RMA
    assert any(t["key"] == L.TAINT_KEY for t in stored["spec"]["taints"])
    assert steps["reboots"] == []


def test_the_verb_prints_the_steps_it_would_take(guard, tmp_path, monkeypatch, capsys):
    from gpuboot import cli

    report = _report(tmp_path, {"n1": "FAIL", "n2": "PASS"})
    monkeypatch.setattr(certify, "certify", lambda inv, **_kw: report)
    inv = str(_inventory(tmp_path))
    assert cli.main(["remediate", "-i", inv, "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines() == [
        "n1: xid:79@0000:3b:00 (dry run: each step shown as if the one before failed)",
        "  reboot: would",
        "  reinstall: would",
        "  quarantine: would",
    ]
    assert cli.main(["remediate", "-i", inv, "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dry_run"] and [n["host"] for n in doc["nodes"]] == ["n1"]
    assert guard == []


def test_a_bad_budget_is_refused_before_any_host(guard, tmp_path, capsys):
    from gpuboot import cli

    inv = str(_inventory(tmp_path))
    assert cli.main(["remediate", "-i", inv, "--max-unavailable", "ten"]) == 2
    assert "--max-unavailable" in capsys.readouterr().err and guard == []


def test_a_fault_the_scans_saw_back_after_two_reboots_is_quarantined(guard, tmp_path, monkeypatch):
    scans = tmp_path / "scans.jsonl"
    fault = "xid:79@0000:3b:00"
    recs = [
        {"time": f"t{i}", "host": "n1", "failing": {"XID-001": "FAIL"}, "boot_id": boot,
         "faults": [fault], "escalated": [], "gpus": {}}
        for i, boot in enumerate(("b1", "b2"))
    ]  # fmt: skip
    scans.write_text("".join(json.dumps(r) + "\n" for r in recs))
    report = _report(tmp_path, {"n1": "FAIL"})
    boot = report.bundle / "n1" / "proc_sys_kernel_random_boot_id.txt"
    monkeypatch.setattr(certify, "certify", lambda inv, **_kw: report)
    monkeypatch.setattr(plays, "reboot", lambda *a: pytest.fail("rebooted an escalated fault"))
    boot.write_text("b2\n")  # seen in two boots so far: a reboot is still worth it
    out = R.run_ladder(_inventory(tmp_path), scan_history=scans, dry_run=True)
    assert out.nodes[0].climb.steps[0].step == "reboot"
    boot.write_text("b3\n")  # back after the second reboot
    out = R.run_ladder(_inventory(tmp_path), scan_history=scans)
    (step,) = out.nodes[0].climb.steps
    assert (step.step, step.result) == ("quarantine", LD.DONE) and guard == []
    (rec,) = record.read(tmp_path / "scans.jsonl.remediation.jsonl")  # beside its scans
    assert rec["step"] == "quarantine"
