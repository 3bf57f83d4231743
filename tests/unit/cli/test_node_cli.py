"""`gpuboot node explain` and `gpuboot node release` against the fake API server: who
holds a node (gpuboot, another tool's marker, another Lease holder, nobody), why, since
when and the one command that releases it; a release removes gpuboot's marks only and
records who and why."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime

import pytest

from gpuboot import cli
from gpuboot.k8s import labels as L
from gpuboot.remediate import record
from gpuboot_lab.kubeapi import FakeApiServer, node

TAKEN_OUT = 1_795_000_000
OURS = {"key": L.TAINT_KEY, "value": L.TAINT_VALUE, "effect": L.TAINT_EFFECT}
OTHER = {"key": "example.com/maintenance", "value": "x", "effect": "NoSchedule"}
OUR_CORDON = {L.ANNOTATION_CORDONED_BY: L.CORDONED_BY_US}
NVSENTINEL = "dgxc.nvidia.com/nvsentinel-state"


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def api(tmp_path):
    server = FakeApiServer().start()
    server.kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
    try:
        yield server
    finally:
        server.stop()


def quarantined(name: str = "n1", **kw) -> dict:
    kw.setdefault("taints", [OURS])
    labels = {L.LABEL_STATE: L.STATE_QUARANTINED, L.LABEL_ACTION: L.QUARANTINE_RMA}
    notes = {
        L.ANNOTATION_REASON: "xid:79@0000:3b:00 (XID-001)",
        L.ANNOTATION_TAKEN_OUT_AT: str(TAKEN_OUT),
        L.ANNOTATION_ACTIONS: json.dumps([{"at": TAKEN_OUT, "step": "reboot", "result": "failed"}]),
    }
    return node(
        name,
        labels={**labels, **kw.pop("labels", {})},
        annotations={**notes, **kw.pop("annotations", {})},
        **kw,
    )


def run(capsys, *argv: str) -> tuple[int, dict]:
    code = cli.main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def explain(capsys, api, name="n1"):
    return run(capsys, "node", "explain", name, "--kubeconfig", api.kubeconfig)


def test_a_node_gpuboot_quarantined_is_explained_with_its_one_release_command(api, home, capsys):
    api.add(quarantined())
    code, doc = explain(capsys, api)
    assert code == 0 and doc["held_by"] == "gpuboot" and doc["state"] == L.STATE_QUARANTINED
    assert doc["why"] == "xid:79@0000:3b:00 (XID-001)" and doc["since"] == "2026-11-18T11:06:40Z"
    words = shlex.split(doc["release"])
    assert words[:4] == ["gpuboot", "node", "release", "n1"]
    assert words[words.index("--kubeconfig") + 1] == api.kubeconfig and "--reason" in words


def test_another_tools_marker_names_that_tool_and_its_own_release(api, home, capsys):
    api.add(node("n1", labels={L.LABEL_MANAGED: "false"}))
    api.add(node("n2", labels={NVSENTINEL: "quarantined"}))
    code, doc = explain(capsys, api)
    assert code == 0 and doc["held_by"] == "another tool" and doc["foreign"]
    assert doc["release"].endswith(f"label node n1 {L.LABEL_MANAGED}-")
    assert doc["release"].startswith("kubectl --kubeconfig ")
    _code, doc = explain(capsys, api, "n2")
    assert doc["held_by"] == "another tool"
    assert doc["release"].startswith("none from gpuboot: the tool that set it releases it")


def test_another_lease_holder_is_named(api, home, capsys):
    api.add(node("n1"))
    api.add_lease("medik8s-leases", "node-n1", "self-node-remediation",
                  renewed=datetime(2026, 11, 27, 9, 0, tzinfo=UTC))  # fmt: skip
    code, doc = explain(capsys, api)
    assert code == 0 and doc["held_by"] == "Lease holder self-node-remediation"
    assert doc["lease"]["holder"] == "self-node-remediation"


def test_a_free_node_is_held_by_nobody(api, home, capsys):
    api.add(node("n1"))
    code, doc = explain(capsys, api)
    assert code == 0 and doc["held_by"] is None and doc["release"] is None


def test_release_removes_gpuboots_marks_only_and_records_who_and_why(api, home, capsys):
    foreign = {"k8saas.nvidia.com/ManagedByNVSentinel": "true", "team": "ml"}
    api.add(quarantined(taints=[OURS, OTHER], labels=foreign,
                        annotations={"other.io/note": "keep"}))  # fmt: skip
    code, doc = run(capsys, "node", "release", "n1", "--reason", "GPU 3 replaced",
                    "--kubeconfig", api.kubeconfig)  # fmt: skip
    assert code == 0 and doc["reason"] == "GPU 3 replaced" and doc["by"]
    stored = api.nodes["n1"]
    labels, notes = stored["metadata"]["labels"], stored["metadata"]["annotations"]
    assert stored["spec"]["taints"] == [OTHER]
    assert L.LABEL_STATE not in labels and L.LABEL_ACTION not in labels
    assert {k: labels[k] for k in foreign} == foreign and notes["other.io/note"] == "keep"
    assert L.ANNOTATION_REASON not in notes and L.ANNOTATION_TAKEN_OUT_AT not in notes
    actions = json.loads(notes[L.ANNOTATION_ACTIONS])
    assert actions[-1]["step"] == "release" and "GPU 3 replaced" in actions[-1]["result"]
    (rec,) = record.read(home / record.HISTORY_NAME)
    assert rec["step"] == "release" and rec["reason"] == "GPU 3 replaced" and rec["by"]
    _code, after = explain(capsys, api)
    assert after["held_by"] is None


@pytest.mark.parametrize(
    ("notes", "uncordoned"),
    [
        (OUR_CORDON, True),
        # cordoned by someone else before gpuboot took it out: their cordon stays
        (
            {L.ANNOTATION_CORDONED_BY: L.CORDONED_BY_US, L.ANNOTATION_WAS_UNSCHEDULABLE: "true"},
            False,
        ),
        ({}, False),  # a cordon gpuboot did not make
    ],
)
def test_release_lifts_only_a_cordon_gpuboot_made(api, home, capsys, notes, uncordoned):
    api.add(quarantined(unschedulable=True, annotations=notes))
    code, _doc = run(capsys, "node", "release", "n1", "--reason", "fixed",
                     "--kubeconfig", api.kubeconfig)  # fmt: skip
    assert code == 0
    assert bool(api.nodes["n1"]["spec"].get("unschedulable")) is not uncordoned


def test_a_quarantine_outside_a_cluster_is_explained_and_released_from_the_history(home, capsys):
    history = home / record.HISTORY_NAME
    record.append(history, [{**record.entry("quarantine", "done", "xid:79@0000:3b:00"),
                             "host": "n1"}])  # fmt: skip
    code, doc = run(capsys, "node", "explain", "n1")
    assert code == 0 and doc["held_by"] == "gpuboot" and doc["state"] == L.STATE_QUARANTINED
    assert shlex.split(doc["release"])[:4] == ["gpuboot", "node", "release", "n1"]
    assert "--kubeconfig" not in doc["release"]
    code, _doc = run(capsys, "node", "release", "n1", "--reason", "board swapped")
    assert code == 0
    _code, doc = run(capsys, "node", "explain", "n1")
    assert doc["held_by"] is None


def test_a_fleets_own_scan_history_keeps_its_own_remediation_history(home, tmp_path, capsys):
    fleet = tmp_path / "fleet-a.jsonl"
    beside = record.beside(fleet)
    assert beside == tmp_path / "fleet-a.jsonl.remediation.jsonl"
    assert (
        record.beside(None)
        == record.beside(home / "scan-history.jsonl")
        == (home / record.HISTORY_NAME)
    )
    record.append(beside, [{**record.entry("quarantine", "done", "f"), "host": "n1"}])
    _code, doc = run(capsys, "node", "explain", "n1", "--history", str(fleet))
    assert doc["held_by"] == "gpuboot"
    assert shlex.split(doc["release"])[-2:] == ["--history", str(fleet)]
    _code, doc = run(capsys, "node", "explain", "n1")  # the default fleet: nothing there
    assert doc["held_by"] is None


def test_an_empty_reason_is_bad_input_before_the_cluster_is_touched(api, home, capsys):
    api.add(quarantined())
    code = cli.main(["node", "release", "n1", "--reason", "  ", "--kubeconfig", api.kubeconfig])
    assert code == 2 and "--reason" in capsys.readouterr().err
    assert api.calls("PATCH") == []


def test_the_api_failing_is_the_run_breaking_and_nothing_half_done(api, home, capsys):
    api.add(quarantined())
    api.inject(500, path="/api/v1/nodes/n1", method="PATCH")
    code = cli.main(["node", "release", "n1", "--reason", "x", "--kubeconfig", api.kubeconfig])
    assert code == 3 and "500" in capsys.readouterr().err
    assert api.nodes["n1"]["metadata"]["labels"][L.LABEL_STATE] == L.STATE_QUARANTINED
    assert record.read(home / record.HISTORY_NAME) == []  # not recorded as released


def test_an_escalation_stays_open_after_the_reboot_that_clears_its_xid_until_release(home, capsys):
    """The reboot that clears an Xid from the kernel log does not mend the part: the RMA
    escalation stays in the history (status, metrics, labels) until an operator releases
    the node, and the release starts its faults' boot counts afresh."""
    from gpuboot import escalation, scan

    history = home / scan.HISTORY_NAME
    fault = "xid:79@0000:3b:00"
    base = {"host": "n1", "failing": {}, "gpus": {}}
    scan.append_history(
        history,
        [
            {**base, "time": f"2026-11-2{i}T00:00:00Z", "boot_id": f"b{i}",
             "faults": [fault], "escalated": [fault] if i == 3 else []}
            for i in (1, 2, 3)
        ],
    )  # fmt: skip
    past = scan.read_history(history)["n1"].faults
    rebooted = escalation.Observation(boot_id="b4", faults={})  # the Xid is gone with the boot
    [kept] = escalation.escalations(rebooted, past)
    assert (kept.fault, kept.new, kept.boots) == (fault, False, 3)
    code, doc = run(capsys, "node", "release", "n1", "--reason", "GPU reseated")
    assert code == 0 and any("escalations closed" in c for c in doc["changes"])
    node = scan.read_history(history)["n1"]
    assert node.last["escalated"] == [] and node.last["time"] == "2026-11-23T00:00:00Z"
    assert escalation.escalations(rebooted, node.faults) == []
    seen_again = escalation.Observation(boot_id="b4", faults={fault: "Xid 79"})
    assert escalation.escalations(seen_again, node.faults) == []  # one boot, not four
