"""gpuboot's node conditions: built from a node's findings, patched beside the kubelet's,
written through the status subresource of the fake API server."""

from __future__ import annotations

import importlib.util
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from gpuboot.k8s import labels as L
from gpuboot.k8s.conditions import (
    MAX_MESSAGE,
    STATUSES,
    condition_patch,
    judged,
    rules_message,
    write_conditions,
)
from gpuboot.results import NodeReport
from gpuboot_lab.kubeapi import FakeApiServer, node
from tests.paths import REPO

from .conftest import finding

NOW = datetime(2026, 11, 27, 10, 0, tzinfo=UTC)
STAMP = "2026-11-27T10:00:00Z"
EARLIER = "2026-11-27T09:00:00Z"
FAILED = ("False", "RulesFailed", "failed: XID-079")
TAINT_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"


def with_conditions(*conditions: dict[str, Any]) -> dict[str, Any]:
    doc = node("gpu-a01")
    doc["status"]["conditions"] += list(conditions)
    return doc


def stored(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": EARLIER,
        "lastTransitionTime": EARLIER,
    }


def report(verdict: str, *findings: dict[str, Any]) -> NodeReport:
    return NodeReport.from_dict({"host": "gpu-a01", "verdict": verdict, "findings": findings})


# ------------------------------------------------------------------ judged


@pytest.mark.parametrize(
    ("node_report", "want"),
    [
        (
            report("FAIL", finding("XID-079", "FAIL"), finding("BW-004", "ERROR")),
            ("False", "RulesFailed", "failed: XID-079; could not run: BW-004"),
        ),
        (  # the harness failed, nothing else: unknown, never a hardware verdict
            report("ERROR", finding("BW-004", "ERROR"), finding("GPU-001", "PASS")),
            ("Unknown", "CheckCouldNotRun", "could not run: BW-004"),
        ),
        (
            report("WARN", finding("BW-002", "WARN")),
            ("False", "RulesWarned", "warned: BW-002"),
        ),
        (report("PASS", finding("GPU-001", "PASS")), ("True", "Certified", "every rule passed")),
    ],
)
def test_judged_names_the_rules_behind_the_status(node_report: NodeReport, want: tuple):
    assert judged(node_report, passed_reason="Certified") == want


def test_judged_lets_a_warn_pass_when_allowed():
    node_report = report("WARN", finding("BW-002", "WARN"))

    assert judged(node_report, passed_reason="Compliant", allow_warn=True) == (
        "True",
        "Compliant",
        "every rule passed or warned",
    )


def test_rules_message_cuts_at_a_whole_id_and_counts_the_rest():
    ids = [f"NVLINK-{i:03d}" for i in range(60)]

    message = rules_message([("failed", ids), ("could not run", ["BW-004"])], limit=80)

    assert len(message) <= 80
    shown = message.removeprefix("failed: ").split(" (+")[0].split(", ")
    assert shown == ids[: len(shown)]
    assert message.endswith(f" (+{61 - len(shown)} more)")


# ------------------------------------------------------------------ condition_patch


def test_a_new_condition_starts_its_transition_now():
    body = condition_patch(node("gpu-a01"), {L.CONDITION_CERTIFIED: FAILED}, NOW)

    # only gpuboot's condition: the strategic merge keys on type and keeps Ready
    assert body == {
        "status": {
            "conditions": [
                {
                    "type": L.CONDITION_CERTIFIED,
                    "status": "False",
                    "reason": "RulesFailed",
                    "message": "failed: XID-079",
                    "lastHeartbeatTime": STAMP,
                    "lastTransitionTime": STAMP,
                }
            ]
        }
    }


def test_a_new_message_keeps_the_transition_time_when_the_status_stays():
    before = with_conditions(stored(L.CONDITION_COMPLIANT, *FAILED))

    body = condition_patch(
        before, {L.CONDITION_COMPLIANT: ("False", "RulesFailed", "failed: GPU-003")}, NOW
    )

    assert body is not None
    [condition] = body["status"]["conditions"]
    assert condition["lastTransitionTime"] == EARLIER
    assert condition["lastHeartbeatTime"] == STAMP
    assert condition["message"] == "failed: GPU-003"


def test_a_new_status_moves_the_transition_time():
    before = with_conditions(stored(L.CONDITION_COMPLIANT, *FAILED))

    body = condition_patch(before, {L.CONDITION_COMPLIANT: ("True", "Compliant", "ok")}, NOW)

    assert body is not None
    assert body["status"]["conditions"][0]["lastTransitionTime"] == STAMP


def test_the_same_judgement_later_refreshes_only_the_heartbeat():
    before = with_conditions(stored(L.CONDITION_COMPLIANT, *FAILED))

    body = condition_patch(before, {L.CONDITION_COMPLIANT: FAILED}, NOW)

    assert body is not None
    assert body["status"]["conditions"] == [
        {**stored(L.CONDITION_COMPLIANT, *FAILED), "lastHeartbeatTime": STAMP}
    ]


def test_nothing_to_write_is_none():
    current = {**stored(L.CONDITION_COMPLIANT, *FAILED), "lastHeartbeatTime": STAMP}

    assert condition_patch(with_conditions(current), {L.CONDITION_COMPLIANT: FAILED}, NOW) is None
    assert condition_patch(node("gpu-a01"), {}, NOW) is None


def test_a_message_is_one_bounded_line():
    wanted = {L.CONDITION_CERTIFIED: ("False", "RulesFailed", "x" * 1000 + "\nsecond line")}

    body = condition_patch(node("gpu-a01"), wanted, NOW)

    assert body is not None
    message = body["status"]["conditions"][0]["message"]
    assert len(message) == MAX_MESSAGE and "\n" not in message


@pytest.mark.parametrize(
    ("status", "reason", "complaint"),
    [
        ("false", "RulesFailed", "status 'false'"),
        ("Unknown", "Check could not run", "not one CamelCase word"),
        ("True", "", "not one CamelCase word"),
    ],
)
def test_a_malformed_condition_is_refused(status: str, reason: str, complaint: str):
    with pytest.raises(ValueError, match=complaint):
        condition_patch(node("gpu-a01"), {L.CONDITION_CERTIFIED: (status, reason, "m")}, NOW)


# ------------------------------------------------------------------ the fake API server

needs_client = pytest.mark.skipif(
    importlib.util.find_spec("kubernetes") is None, reason="the k8s extra is not installed"
)


@needs_client
def test_write_conditions_goes_through_the_status_subresource_beside_ready(
    apiserver: FakeApiServer, kubeconfig: str
):
    from gpuboot.k8s.client import connect

    apiserver.add(node("gpu-a01"))
    api = connect(kubeconfig, None)
    wanted = {
        L.CONDITION_CERTIFIED: FAILED,
        L.CONDITION_COMPLIANT: ("Unknown", "CheckCouldNotRun", "could not run: BW-004"),
    }

    changes = write_conditions(api, "gpu-a01", wanted, now=NOW, dry_run=False)

    assert changes == [
        "condition GPUBootCertified=False (RulesFailed: failed: XID-079)",
        "condition GPUBootCompliant=Unknown (CheckCouldNotRun: could not run: BW-004)",
    ]
    [patch] = apiserver.status_patches("gpu-a01")
    assert patch.method == "PATCH" and patch.query == {"fieldManager": ["gpuboot"]}
    assert apiserver.patches() == []  # never through the main resource (it ignores status)
    assert apiserver.condition("gpu-a01", "Ready") == {"type": "Ready", "status": "True"}
    assert apiserver.condition("gpu-a01", L.CONDITION_CERTIFIED)["status"] == "False"

    later = write_conditions(api, "gpu-a01", wanted, now=NOW + timedelta(hours=1), dry_run=False)

    assert later == []  # the same judgement: no change in words, a fresh heartbeat
    certified = apiserver.condition("gpu-a01", L.CONDITION_CERTIFIED)
    assert certified["lastHeartbeatTime"] == "2026-11-27T11:00:00Z"
    assert certified["lastTransitionTime"] == STAMP


@needs_client
def test_a_dry_run_writes_no_condition(apiserver: FakeApiServer, kubeconfig: str):
    from gpuboot.k8s.client import connect

    apiserver.add(node("gpu-a01"))

    changes = write_conditions(
        connect(kubeconfig, None), "gpu-a01", {L.CONDITION_CERTIFIED: FAILED}, now=NOW, dry_run=True
    )

    assert changes == ["condition GPUBootCertified=False (RulesFailed: failed: XID-079)"]
    [patch] = apiserver.status_patches("gpu-a01")
    assert patch.query["dryRun"] == ["All"]
    assert apiserver.condition("gpu-a01", L.CONDITION_CERTIFIED) is None


# ------------------------------------------------------------------ the README's rule


def test_the_node_readiness_rule_example_names_gpuboots_condition_and_a_legal_taint():
    # what the controller's v1alpha1 CRD (v0.5.0) admits, and the condition gpuboot writes
    doc = yaml.safe_load((REPO / "docs" / "node-readiness-rule.yaml").read_text())
    spec = doc["spec"]

    assert doc["apiVersion"] == "readiness.node.x-k8s.io/v1alpha1"
    assert doc["kind"] == "NodeReadinessRule"
    assert [c["type"] for c in spec["conditions"]] == [L.CONDITION_CERTIFIED]
    assert all(c["requiredStatus"] in STATUSES for c in spec["conditions"])
    prefix, _, name = spec["taint"]["key"].partition("/")
    assert prefix == "readiness.k8s.io" and re.fullmatch(TAINT_NAME, name)
    assert spec["taint"]["effect"] == "NoSchedule"
    assert spec["enforcementMode"] == "bootstrap-only"
    # the controller's webhook refuses defaultStatus with bootstrap-only, and an empty selector
    assert not any("defaultStatus" in c for c in spec["conditions"])
    assert spec["nodeSelector"]["matchLabels"]
