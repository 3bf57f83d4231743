"""The join gate against a fake API server: the exact requests it makes per case."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuboot.errors import BadInput, ConfigError
from gpuboot.k8s import apply_gate
from gpuboot_lab.kubeapi import TOKEN, FakeApiServer, node

from .conftest import EXPIRES, NOW, Reports, finding, gate_args

if importlib.util.find_spec("kubernetes") is None:
    if os.environ.get("CI"):  # CI installs the k8s extra: a silent skip would hide the gate
        raise RuntimeError("the kubernetes client is missing on CI: install gpuboot[k8s]")
    pytest.skip("the k8s extra (kubernetes client) is not installed", allow_module_level=True)

UNCERT = {"key": "gpuboot.io/uncertified", "value": "true", "effect": "NoSchedule"}
GPU_OP = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNREACHABLE = {
    "key": "node.kubernetes.io/unreachable",
    "effect": "NoExecute",
    "timeAdded": "2026-11-22T09:00:00Z",
}
SMP = "application/strategic-merge-patch+json"
CERTIFIED, STACK = "gpuboot.io/certified", "gpuboot.io/stack"
SHA, EXPIRY = "gpuboot.io/cert-sha256", "gpuboot.io/cert-expiry"
FAILED, CORDONED_BY = "gpuboot.io/failed-rules", "gpuboot.io/cordoned-by"


def gate(report: dict[str, Any], kubeconfig: str, **kw: Any):
    run, certs = gate_args(report)
    return apply_gate(run, certificates=certs, kubeconfig=kubeconfig, now=kw.pop("now", NOW), **kw)


def cert_labels(report: dict[str, Any], host: str) -> dict[str, str]:
    data = Path(report["reports"][f"certificate:{host}"]).read_bytes()
    return {SHA: hashlib.sha256(data).hexdigest()[:16], EXPIRY: str(int(EXPIRES.timestamp()))}


def path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


# ------------------------------------------------------------------ PASS


def test_pass_removes_only_the_uncertified_taint_and_labels_the_node(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[GPU_OP, UNCERT, UNREACHABLE], labels={"team": "ml"}))
    report = reports.make(
        {"gpu-a01": "PASS"}, pins={"gpu-a01": {"gpuboot_stack": "lts-550-cuda12.4"}}
    )

    [action] = gate(report, kubeconfig)

    assert apiserver.calls() == [("GET", path("gpu-a01")), ("PATCH", path("gpu-a01"))]
    [patch] = apiserver.patches()
    assert patch.content_type == SMP
    assert patch.query == {"fieldManager": ["gpuboot"]}
    assert patch.authorization == f"Bearer {TOKEN}"
    assert patch.body == {
        "metadata": {
            "labels": {
                CERTIFIED: "true",
                STACK: "lts-550-cuda12.4",
                **cert_labels(report, "gpu-a01"),
            },
            "resourceVersion": "100",
        },
        # the whole list, other taints exactly as read (timeAdded included)
        "spec": {"taints": [GPU_OP, UNREACHABLE]},
    }
    stored = apiserver.nodes["gpu-a01"]
    assert stored["spec"]["taints"] == [GPU_OP, UNREACHABLE]
    assert stored["metadata"]["labels"]["team"] == "ml"
    assert stored["metadata"]["labels"][CERTIFIED] == "true"
    assert action.error is None and action.verdict == "PASS" and action.node == "gpu-a01"
    assert "taint gpuboot.io/uncertified:NoSchedule removed" in action.changes


def test_pass_clears_the_marks_of_an_earlier_failure(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT], labels={CERTIFIED: "false", FAILED: "XID-079"}))
    report = reports.make(
        {"gpu-a01": "PASS"}, pins={"gpu-a01": {"nvidia_driver_version": "550.54.15"}}
    )

    gate(report, kubeconfig)

    [patch] = apiserver.patches()
    assert patch.body["metadata"]["labels"] == {
        CERTIFIED: "true",
        FAILED: None,  # strategic merge: null deletes the label
        STACK: "550.54.15",  # no stack pinned: the driver version
        **cert_labels(report, "gpu-a01"),
    }
    assert FAILED not in apiserver.nodes["gpu-a01"]["metadata"]["labels"]


def test_pass_uncordons_a_node_gpuboot_cordoned(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(
        node(
            "gpu-a01",
            taints=[UNCERT],
            unschedulable=True,
            annotations={CORDONED_BY: "gpuboot", "other": "kept"},
        )
    )
    report = reports.make({"gpu-a01": "PASS"})

    [action] = gate(report, kubeconfig)

    [patch] = apiserver.patches()
    assert patch.body["spec"] == {"taints": [], "unschedulable": False}
    assert patch.body["metadata"]["annotations"] == {CORDONED_BY: None}
    stored = apiserver.nodes["gpu-a01"]
    assert not stored["spec"].get("unschedulable")
    assert stored["metadata"]["annotations"] == {"other": "kept"}
    assert "uncordoned (gpuboot had cordoned it)" in action.changes


def test_pass_leaves_a_node_cordoned_by_someone_else_cordoned(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT], unschedulable=True))
    report = reports.make({"gpu-a01": "PASS"})

    [action] = gate(report, kubeconfig)

    [patch] = apiserver.patches()
    assert patch.body["spec"] == {"taints": []}  # no unschedulable: the cordon is not ours
    assert "annotations" not in patch.body["metadata"]
    assert apiserver.nodes["gpu-a01"]["spec"]["unschedulable"] is True
    assert any("someone else" in n for n in action.notes)


# ------------------------------------------------------------------ FAIL / ERROR


@pytest.mark.parametrize(
    ("verdict", "findings", "failed"),
    [
        (
            "FAIL",
            [
                finding("XID-079", "FAIL"),
                finding("GPU-003", "FAIL"),
                finding("NVL-001", "ERROR"),
                finding("PCI-001", "PASS"),
                finding("ECC-002", "WARN"),
            ],
            "GPU-003_NVL-001_XID-079",
        ),
        ("ERROR", [finding("BW-004", "ERROR"), finding("GPU-001", "PASS")], "BW-004"),
    ],
)
def test_fail_and_error_taint_label_and_cordon_a_schedulable_node(
    apiserver: FakeApiServer,
    kubeconfig: str,
    reports: Reports,
    verdict: str,
    findings: list[dict[str, Any]],
    failed: str,
):
    # a node that passed before: its certificate labels must go
    apiserver.add(
        node(
            "gpu-a02",
            taints=[GPU_OP],
            labels={CERTIFIED: "true", STACK: "lts-550", SHA: "0123456789abcdef"},
        )
    )
    report = reports.make({"gpu-a02": verdict}, findings={"gpu-a02": findings})

    [action] = gate(report, kubeconfig)

    assert apiserver.calls() == [("GET", path("gpu-a02")), ("PATCH", path("gpu-a02"))]
    [patch] = apiserver.patches()
    assert patch.content_type == SMP
    assert patch.body == {
        "metadata": {
            "labels": {CERTIFIED: "false", FAILED: failed, STACK: None, SHA: None},
            "annotations": {CORDONED_BY: "gpuboot"},
            "resourceVersion": "100",
        },
        "spec": {"taints": [GPU_OP, UNCERT], "unschedulable": True},
    }
    stored = apiserver.nodes["gpu-a02"]
    assert stored["spec"] == {"taints": [GPU_OP, UNCERT], "unschedulable": True}
    assert stored["metadata"]["annotations"] == {CORDONED_BY: "gpuboot"}
    assert {STACK, SHA} & set(stored["metadata"]["labels"]) == set()
    assert action.error is None and action.verdict == verdict
    assert "cordoned (spec.unschedulable=true)" in action.changes


def test_fail_keeps_an_existing_uncertified_taint_as_it_is(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    registered = {**UNCERT, "timeAdded": "2026-11-20T08:00:00Z"}
    apiserver.add(node("gpu-a02", taints=[registered, GPU_OP]))
    report = reports.make({"gpu-a02": "FAIL"}, findings={"gpu-a02": [finding("XID-079", "FAIL")]})

    gate(report, kubeconfig)

    [patch] = apiserver.patches()
    assert "taints" not in patch.body["spec"]  # nothing to add: the list is left alone
    assert apiserver.nodes["gpu-a02"]["spec"]["taints"] == [registered, GPU_OP]


def test_a_cordon_made_by_someone_else_is_never_claimed(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a02", taints=[UNCERT], unschedulable=True))
    failing = reports.make({"gpu-a02": "FAIL"}, findings={"gpu-a02": [finding("XID-079", "FAIL")]})

    gate(failing, kubeconfig)  # FAIL on an already cordoned node: no gpuboot mark
    gate(reports.make({"gpu-a02": "PASS"}), kubeconfig)  # so a later PASS leaves it cordoned

    fail_patch, pass_patch = apiserver.patches()
    assert "annotations" not in fail_patch.body["metadata"]
    assert "unschedulable" not in fail_patch.body.get("spec", {})
    assert "unschedulable" not in pass_patch.body["spec"]
    assert apiserver.nodes["gpu-a02"]["spec"]["unschedulable"] is True
    assert CORDONED_BY not in apiserver.nodes["gpu-a02"]["metadata"]["annotations"]


# ------------------------------------------------------------------ WARN


def test_warn_stays_tainted_unless_allowed(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a03", taints=[UNCERT]))
    report = reports.make(
        {"gpu-a03": "WARN"},
        findings={"gpu-a03": [finding("BW-002", "WARN"), finding("GPU-001", "PASS")]},
        certify=("gpu-a03",),
    )

    [held] = gate(report, kubeconfig)
    [let_in] = gate(report, kubeconfig, allow_warn=True)

    first, second = apiserver.patches()
    assert first.body == {
        "metadata": {"labels": {CERTIFIED: "false", FAILED: "BW-002"}, "resourceVersion": "100"}
    }  # no taint change, no cordon: degraded, not broken
    assert second.body["spec"] == {"taints": []}
    assert second.body["metadata"]["labels"][CERTIFIED] == "true"
    assert held.error is None and let_in.error is None


# ------------------------------------------------------------------ refusals


def test_pass_without_a_certificate_is_not_touched(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    report = reports.make({"gpu-a01": "PASS"}, certify=())

    [action] = gate(report, kubeconfig)

    assert apiserver.requests == []
    assert "no certificate" in (action.error or "")


def test_an_expired_certificate_does_not_lift_the_taint(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    report = reports.make({"gpu-a01": "PASS"})

    [action] = gate(report, kubeconfig, now=EXPIRES + timedelta(seconds=1))

    assert apiserver.requests == []
    assert "expired" in (action.error or "")


# ------------------------------------------------------------------ per-node errors


def test_a_node_missing_from_the_cluster_is_reported_and_the_others_gated(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    report = reports.make({"ghost": "FAIL", "gpu-a01": "PASS"})

    ghost, a01 = gate(report, kubeconfig)

    assert apiserver.calls() == [
        ("GET", path("ghost")),
        ("GET", path("gpu-a01")),
        ("PATCH", path("gpu-a01")),
    ]
    assert ghost.missing and "no such node" in (ghost.error or "") and ghost.changes == []
    assert not a01.missing and a01.error is None
    assert apiserver.nodes["gpu-a01"]["spec"]["taints"] == []


def test_a_conflict_on_one_node_is_that_nodes_error_and_clobbers_nothing(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    apiserver.add(node("gpu-a02"))
    # another writer changes gpu-a01 between the gate's GET and its PATCH
    apiserver.before_patch["gpu-a01"] = lambda _n: apiserver.touch("gpu-a01", team="infra")
    report = reports.make(
        {"gpu-a01": "PASS", "gpu-a02": "FAIL"}, findings={"gpu-a02": [finding("XID-079", "FAIL")]}
    )

    a01, a02 = gate(report, kubeconfig)

    assert apiserver.calls() == [
        ("GET", path("gpu-a01")),
        ("PATCH", path("gpu-a01")),
        ("GET", path("gpu-a02")),
        ("PATCH", path("gpu-a02")),
    ]
    assert apiserver.patches("gpu-a01")[0].body["metadata"]["resourceVersion"] == "100"
    assert "conflict" in (a01.error or "") and a01.changes == []
    stored = apiserver.nodes["gpu-a01"]
    assert stored["metadata"]["labels"]["team"] == "infra"  # the other writer's change stands
    assert stored["spec"]["taints"] == [UNCERT] and CERTIFIED not in stored["metadata"]["labels"]
    assert a02.error is None and apiserver.nodes["gpu-a02"]["spec"]["unschedulable"] is True


def test_api_errors_are_collected_per_node(
    apiserver: FakeApiServer, reports: Reports, tmp_path: Path
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    apiserver.add(node("gpu-a02"))
    kubeconfig = str(apiserver.write_kubeconfig(tmp_path / "kc", token="revoked"))
    report = reports.make({"gpu-a01": "PASS", "gpu-a02": "FAIL"})

    actions = gate(report, kubeconfig)

    assert apiserver.calls() == [("GET", path("gpu-a01")), ("GET", path("gpu-a02"))]
    assert all("401" in (a.error or "") and not a.missing for a in actions)


def test_an_unreachable_cluster_is_every_nodes_error_not_a_crash(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    report = reports.make({"gpu-a01": "PASS", "gpu-a02": "FAIL"})

    actions = gate(report, kubeconfig, context="nowhere")  # the context picks the cluster

    assert apiserver.requests == []
    assert [bool(a.error and "cannot reach" in a.error) for a in actions] == [True, True]


# ------------------------------------------------------------------ dry run, idempotence


def test_dry_run_sends_only_dry_run_patches_and_predicts_the_real_run(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[GPU_OP, UNCERT]))
    apiserver.add(node("gpu-a02"))
    report = reports.make(
        {"gpu-a01": "PASS", "gpu-a02": "FAIL"}, findings={"gpu-a02": [finding("XID-079", "FAIL")]}
    )
    before = copy.deepcopy(apiserver.nodes)

    planned = gate(report, kubeconfig, dry_run=True)

    patches = apiserver.patches()
    assert len(patches) == 2
    assert all(p.query == {"fieldManager": ["gpuboot"], "dryRun": ["All"]} for p in patches)
    assert apiserver.nodes == before
    assert all(a.dry_run and a.changes and a.error is None for a in planned)

    done = gate(report, kubeconfig)
    assert [a.changes for a in done] == [a.changes for a in planned]
    assert all("dryRun" not in p.query for p in apiserver.patches()[2:])
    assert apiserver.nodes != before


def test_a_second_run_only_reads(apiserver: FakeApiServer, kubeconfig: str, reports: Reports):
    apiserver.add(
        node("gpu-a01", taints=[UNCERT], unschedulable=True, annotations={CORDONED_BY: "gpuboot"})
    )
    apiserver.add(node("gpu-a02"))
    report = reports.make(
        {"gpu-a01": "PASS", "gpu-a02": "FAIL"}, findings={"gpu-a02": [finding("XID-079", "FAIL")]}
    )
    gate(report, kubeconfig)
    apiserver.requests.clear()

    again = gate(report, kubeconfig)

    assert apiserver.calls() == [("GET", path("gpu-a01")), ("GET", path("gpu-a02"))]
    assert [a.changes for a in again] == [[], []]
    assert all(a.error is None for a in again)


# ------------------------------------------------------------------ names and values


def test_inventory_hosts_map_to_kubernetes_node_names(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("worker-17", taints=[UNCERT]))
    report = reports.make({"gpu-a01": "PASS"})

    [action] = gate(report, kubeconfig, node_names={"gpu-a01": "worker-17"})

    assert apiserver.calls() == [("GET", path("worker-17")), ("PATCH", path("worker-17"))]
    assert (action.node, action.host) == ("worker-17", "gpu-a01")


def test_label_values_are_sanitised_so_the_api_server_accepts_them(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    apiserver.add(node("gpu-a02"))
    rules = [finding(f"GPU-{i:03d}", "FAIL") for i in range(12, 0, -1)]  # 12 ids: 95 chars
    report = reports.make(
        {"gpu-a01": "PASS", "gpu-a02": "FAIL"},
        findings={"gpu-a02": rules},
        pins={"gpu-a01": {"nvidia_driver_version": "1:550.54.15-0ubuntu1~22.04+really"}},
    )

    a01, a02 = gate(report, kubeconfig)

    assert a01.error is None and a02.error is None  # the fake server 422s bad values
    labels01 = apiserver.patches("gpu-a01")[0].body["metadata"]["labels"]
    labels02 = apiserver.patches("gpu-a02")[0].body["metadata"]["labels"]
    assert labels01[STACK] == "1_550.54.15-0ubuntu1_22.04_really"
    assert labels02[FAILED] == "_".join(f"GPU-{i:03d}" for i in range(1, 9))  # whole ids, 63
    assert len(labels02[FAILED]) == 63


# ------------------------------------------------------------------ set-up errors


def test_an_unreadable_kubeconfig_is_bad_input(reports: Reports, tmp_path: Path):
    with pytest.raises(ConfigError, match="kubeconfig"):
        gate(reports.make({"gpu-a01": "FAIL"}), str(tmp_path / "absent"))


def test_without_the_kubernetes_client_the_gate_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, kubeconfig: str, reports: Reports
):
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(BadInput) as info:
        gate(reports.make({"gpu-a01": "FAIL"}), kubeconfig)
    assert "gpuboot[k8s]" in (info.value.hint or "")
