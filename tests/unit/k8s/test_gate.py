"""The join gate against a fake API server: the exact requests it makes per case."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuboot.errors import BadInput, ConfigError
from gpuboot.k8s import apply_gate
from gpuboot.k8s.budget import Limits
from gpuboot.results import RunReport
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
STATE, TAKEN_OUT_AT, REASON = "gpuboot.io/state", "gpuboot.io/taken-out-at", "gpuboot.io/reason"
ACTIONS = "gpuboot.io/actions"
LIST = ("GET", "/api/v1/nodes")  # the disruption gate counts from one list, first


# a budget that never binds, for the cases about something else (tiny clusters: the
# default 10% of 2 nodes is 1)
OPEN = Limits(max_unavailable="100%", max_new="100%")


def gate(report: dict[str, Any], kubeconfig: str, **kw: Any):
    run, certs = gate_args(report)
    kw.setdefault("limits", OPEN)
    return apply_gate(run, certificates=certs, kubeconfig=kubeconfig, now=kw.pop("now", NOW), **kw)


def cert_labels(report: dict[str, Any], host: str) -> dict[str, str]:
    data = Path(report["reports"][f"certificate:{host}"]).read_bytes()
    return {SHA: hashlib.sha256(data).hexdigest()[:16], EXPIRY: str(int(EXPIRES.timestamp()))}


def path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


def acted(name: str) -> list[tuple[str, str]]:
    """The requests of a node patched and given new conditions (read, patch, read, status)."""
    return [
        ("GET", path(name)),
        ("PATCH", path(name)),
        ("GET", path(name)),
        ("PATCH", f"{path(name)}/status"),
    ]


# ------------------------------------------------------------------ PASS


def test_pass_removes_only_the_uncertified_taint_and_labels_the_node(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[GPU_OP, UNCERT, UNREACHABLE], labels={"team": "ml"}))
    report = reports.make(
        {"gpu-a01": "PASS"}, pins={"gpu-a01": {"gpuboot_stack": "lts-550-cuda12.4"}}
    )

    [action] = gate(report, kubeconfig)

    assert apiserver.calls() == [LIST, *acted("gpu-a01")]
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


def test_fail_takes_the_node_out_with_gpuboots_taint_not_a_cordon(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    # a node that passed before: its certificate labels must go
    apiserver.add(
        node(
            "gpu-a02",
            taints=[GPU_OP],
            labels={CERTIFIED: "true", STACK: "lts-550", SHA: "0123456789abcdef"},
        )
    )
    findings = [
        finding("XID-079", "FAIL"),
        finding("GPU-003", "FAIL"),
        finding("NVL-001", "ERROR"),
        finding("PCI-001", "PASS"),
        finding("ECC-002", "WARN"),
    ]
    report = reports.make({"gpu-a02": "FAIL"}, findings={"gpu-a02": findings})

    [action] = gate(report, kubeconfig)

    assert apiserver.calls() == [LIST, *acted("gpu-a02")]
    [patch] = apiserver.patches()
    assert patch.content_type == SMP
    why = "failed: GPU-003, XID-079; could not run: NVL-001"
    assert patch.body == {
        "metadata": {
            "labels": {
                CERTIFIED: "false",
                FAILED: "GPU-003_NVL-001_XID-079",
                STACK: None,
                SHA: None,
                STATE: "taken-out",
            },
            "annotations": {
                TAKEN_OUT_AT: str(int(NOW.timestamp())),
                REASON: why,
                ACTIONS: json.dumps(
                    [{"at": int(NOW.timestamp()), "step": "take-out", "result": why}],
                    separators=(",", ":"),
                ),
            },
            "resourceVersion": "100",
        },
        "spec": {"taints": [GPU_OP, UNCERT]},  # no cordon: nothing evicts its pods
    }
    stored = apiserver.nodes["gpu-a02"]
    assert stored["spec"]["taints"] == [GPU_OP, UNCERT]
    assert not stored["spec"].get("unschedulable")
    assert {STACK, SHA} & set(stored["metadata"]["labels"]) == set()
    for kind in ("GPUBootCertified", "GPUBootCompliant"):
        condition = apiserver.condition("gpu-a02", kind) or {}
        assert (condition.get("status"), condition.get("reason")) == ("False", "RulesFailed")
        assert condition.get("message") == why
    assert action.error is None and action.held is None and action.verdict == "FAIL"
    assert "taint gpuboot.io/uncertified=true:NoSchedule added" in action.changes


def test_a_node_that_could_not_be_judged_is_left_as_it_is_and_says_unknown(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a02", taints=[GPU_OP], labels={CERTIFIED: "true"}))
    report = reports.make(
        {"gpu-a02": "ERROR"},
        findings={"gpu-a02": [finding("BW-004", "ERROR"), finding("GPU-001", "PASS")]},
    )

    [action] = gate(report, kubeconfig)

    assert apiserver.patches() == []  # what could not be read says nothing of the hardware
    assert apiserver.nodes["gpu-a02"]["spec"]["taints"] == [GPU_OP]
    for kind in ("GPUBootCertified", "GPUBootCompliant"):
        condition = apiserver.condition("gpu-a02", kind) or {}
        assert (condition.get("status"), condition.get("reason")) == (
            "Unknown",
            "CheckCouldNotRun",
        )
        assert "BW-004" in condition.get("message", "")
    assert action.error is None and any("could not judge BW-004" in n for n in action.notes)


def test_fail_keeps_an_existing_uncertified_taint_as_it_is(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    registered = {**UNCERT, "timeAdded": "2026-11-20T08:00:00Z"}
    apiserver.add(node("gpu-a02", taints=[registered, GPU_OP]))
    report = reports.make({"gpu-a02": "FAIL"}, findings={"gpu-a02": [finding("XID-079", "FAIL")]})

    gate(report, kubeconfig)

    [patch] = apiserver.patches()
    assert "spec" not in patch.body  # nothing to add: the taint list is left alone
    assert apiserver.nodes["gpu-a02"]["spec"]["taints"] == [registered, GPU_OP]


def test_a_cordon_made_by_someone_else_is_never_claimed(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a02", taints=[UNCERT], unschedulable=True))
    failing = reports.make({"gpu-a02": "FAIL"}, findings={"gpu-a02": [finding("XID-079", "FAIL")]})

    gate(failing, kubeconfig)  # FAIL on an already cordoned node: no gpuboot mark
    gate(reports.make({"gpu-a02": "PASS"}), kubeconfig)  # so a later PASS leaves it cordoned

    fail_patch, pass_patch = apiserver.patches()
    assert CORDONED_BY not in fail_patch.body["metadata"].get("annotations", {})
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
        "metadata": {
            "labels": {CERTIFIED: "false", FAILED: "BW-002", STATE: "taken-out"},
            "annotations": {REASON: "warned: BW-002"},
            "resourceVersion": "100",
        }
    }  # the taint it has stays, no cordon: degraded, not broken
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

    assert apiserver.calls() == [LIST, *acted("gpu-a01")]  # not in the list: never asked for
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
        LIST,
        ("GET", path("gpu-a01")),
        ("PATCH", path("gpu-a01")),  # 409: neither its conditions nor a stop for the others
        *acted("gpu-a02"),
    ]
    assert apiserver.patches("gpu-a01")[0].body["metadata"]["resourceVersion"] == "100"
    assert "conflict" in (a01.error or "") and a01.changes == []
    stored = apiserver.nodes["gpu-a01"]
    assert stored["metadata"]["labels"]["team"] == "infra"  # the other writer's change stands
    assert stored["spec"]["taints"] == [UNCERT] and CERTIFIED not in stored["metadata"]["labels"]
    assert a02.error is None and apiserver.nodes["gpu-a02"]["spec"]["taints"] == [UNCERT]


def test_api_errors_are_collected_per_node(
    apiserver: FakeApiServer, reports: Reports, tmp_path: Path
):
    apiserver.add(node("gpu-a01", taints=[UNCERT]))
    apiserver.add(node("gpu-a02"))
    kubeconfig = str(apiserver.write_kubeconfig(tmp_path / "kc", token="revoked"))
    report = reports.make({"gpu-a01": "PASS", "gpu-a02": "FAIL"})

    actions = gate(report, kubeconfig)

    assert apiserver.calls() == [LIST]  # refused: nothing is decided without the list
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

    assert apiserver.calls() == [
        LIST,
        *[("GET", path(name)) for name in ("gpu-a01", "gpu-a01", "gpu-a02", "gpu-a02")],
    ]  # the node, then its conditions: read, found as wanted
    assert [a.changes for a in again] == [[], []]
    assert all(a.error is None for a in again)


# ------------------------------------------------------------------ names and values


def test_inventory_hosts_map_to_kubernetes_node_names(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("worker-17", taints=[UNCERT]))
    report = reports.make({"gpu-a01": "PASS"})

    [action] = gate(report, kubeconfig, node_names={"gpu-a01": "worker-17"})

    assert apiserver.calls() == [LIST, *acted("worker-17")]
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


# ------------------------------------------------------------------ the disruption gate

XID_48 = "Xid 48 (double-bit ECC error) on 0000:1b:00.0"
XID_79 = "Xid 79 (GPU has fallen off the bus) on 0000:1b:00.0"
CANCELLED_AT = "gpuboot.io/cancelled-at"
T0 = NOW.timestamp()


def scan(*failing: str, reason: str = XID_48) -> RunReport:
    """A scan's report: only its failing nodes go to the gate."""
    fault = {"rule": "XID-001", "title": "Xid", "status": "FAIL", "reason": reason}
    nodes = [{"host": h, "verdict": "FAIL", "findings": [fault]} for h in failing]
    return RunReport.from_dict({"run_id": "scan", "nodes": nodes})


def scan_gate(kubeconfig: str, run: RunReport, at: float, **kw: Any):
    kw.setdefault("limits", OPEN)
    return apply_gate(run, kubeconfig=kubeconfig, now=datetime.fromtimestamp(at, UTC), **kw)


def taken_out_times(apiserver: FakeApiServer) -> dict[str, float]:
    return {
        name: float(doc["metadata"]["annotations"][TAKEN_OUT_AT])
        for name, doc in apiserver.nodes.items()
        if TAKEN_OUT_AT in (doc["metadata"].get("annotations") or {})
    }


def test_twelve_failures_over_an_hour_never_exceed_the_new_take_outs_per_window(
    apiserver: FakeApiServer, kubeconfig: str
):
    for i in range(40):
        apiserver.add(node(f"n{i:02d}"))
    fails_at = [0, 0, 0, 0, 0, 300, 300, 900, 1200, 1200, 1800, 2400]  # s after T0
    limits = Limits(max_unavailable="50%", max_new="2", window_s=600)

    for t in range(0, 5401, 300):  # a scan every 5 minutes for an hour and a half
        failing = [f"n{i:02d}" for i, at in enumerate(fails_at) if at <= t]
        actions = scan_gate(kubeconfig, scan(*failing), T0 + t, limits=limits)
        assert all(a.error is None for a in actions)
        times = sorted(taken_out_times(apiserver).values())
        for start in times:
            assert len([x for x in times if start <= x < start + 600]) <= 2, t

    assert sorted(taken_out_times(apiserver)) == [f"n{i:02d}" for i in range(12)]  # all, in the end


def test_a_restart_after_four_take_outs_still_refuses_the_fifth_and_sixth(
    apiserver: FakeApiServer, kubeconfig: str
):
    for i in range(40):
        apiserver.add(node(f"n{i:02d}"))
    limits = Limits(max_unavailable="50%", max_new="10%", window_s=600)  # 4 of 40
    first = scan_gate(kubeconfig, scan("n00", "n01", "n02", "n03"), T0, limits=limits)
    assert [a.held for a in first] == [None] * 4  # ... then gpuboot is killed

    # a new process: nothing in memory, the window read back from the nodes
    again = scan_gate(kubeconfig, scan(*[f"n{i:02d}" for i in range(6)]), T0 + 120, limits=limits)

    assert [a.held for a in again[:4]] == [None] * 4  # already out: no admission needed
    for action in again[4:]:
        assert action.held == (
            "held back: gpuboot took out 4 of 40 nodes in the last 600 s, --max-new-takeouts 10% "
            "per --takeout-window 600"
        )
        stored = apiserver.nodes[action.node]
        assert UNCERT not in stored["spec"]["taints"]
        assert stored["metadata"]["labels"][STATE] == "noncompliant"  # flagged, visible
        assert stored["metadata"]["annotations"][REASON] == action.held
    later = scan_gate(kubeconfig, scan(*[f"n{i:02d}" for i in range(6)]), T0 + 601, limits=limits)
    assert [a.held for a in later] == [None] * 6
    assert UNCERT in apiserver.nodes["n05"]["spec"]["taints"]


def test_a_take_out_still_counts_in_its_window_once_the_node_is_back(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    for name in ("gpu-a01", *[f"n{i:02d}" for i in range(19)]):
        apiserver.add(node(name))
    limits = Limits(max_new="1")
    scan_gate(kubeconfig, scan("gpu-a01"), T0, limits=limits)
    assert apiserver.nodes["gpu-a01"]["spec"]["taints"] == [UNCERT]
    passed, certs = gate_args(reports.make({"gpu-a01": "PASS"}))
    apply_gate(passed, certificates=certs, kubeconfig=kubeconfig, now=NOW, limits=limits)
    assert apiserver.nodes["gpu-a01"]["spec"]["taints"] == []  # back in service

    [held] = scan_gate(kubeconfig, scan("n00"), T0 + 60, limits=limits)

    assert "gpuboot took out 1 of 20 nodes in the last 600 s" in (held.held or "")


def test_four_domains_a_rolling_install_a_scan_and_a_foreign_cordon_never_two_of_a_domain_out(
    apiserver: FakeApiServer, kubeconfig: str
):
    from gpuboot.k8s.budget import census
    from gpuboot.k8s.drain import drain

    racks = {f"r{r}{x}": f"r{r}" for r in range(4) for x in "ab"}
    for name, rack in racks.items():
        apiserver.add(node(name, labels={"rack": rack}))
    limits = Limits(max_unavailable="100%", max_new="100%", domain_label="rack")

    def out_per_rack() -> dict[str, int]:
        out = census(list(apiserver.nodes.values()), now=T0, window_s=600).unavailable
        count: dict[str, int] = {}
        for name in out:
            count[racks[name]] = count.get(racks[name], 0) + 1
        return count

    apiserver.edit("r1a", lambda doc: doc["spec"].update(unschedulable=True))  # another tool
    steps = [
        lambda: drain(["r0a", "r1b", "r2a"], kubeconfig=kubeconfig, limits=limits),
        lambda: scan_gate(kubeconfig, scan("r0b", "r2b", "r3a"), T0, limits=limits),
        lambda: drain(["r3b", "r1b", "r2b"], kubeconfig=kubeconfig, limits=limits),
    ]
    for step in steps:
        step()
        assert max(out_per_rack().values()) == 1

    assert out_per_rack() == {"r0": 1, "r1": 1, "r2": 1, "r3": 1}
    assert apiserver.nodes["r3a"]["spec"]["taints"] == [UNCERT]  # the scan's take-out
    assert not apiserver.nodes["r3b"]["spec"].get("unschedulable")  # so r3b waits


def test_the_api_server_failing_takes_no_action_and_leaves_nothing_half_done(
    apiserver: FakeApiServer, kubeconfig: str
):
    for name in ("n1", "n2", "n3"):
        apiserver.add(node(name))
    apiserver.inject(500, path="^/api/v1/nodes$", times=1)

    refused = scan_gate(kubeconfig, scan("n1", "n2", "n3"), T0)

    assert apiserver.calls() == [LIST]  # nothing is decided from what could not be read
    assert all("cannot list the nodes" in (a.error or "") for a in refused)

    apiserver.requests.clear()
    apiserver.inject(500, path="^/api/v1/nodes/n2$", method="PATCH", times=1)
    broken = scan_gate(kubeconfig, scan("n1", "n2", "n3"), T0 + 60)

    assert [a.error is None for a in broken] == [True, False, False]
    assert "500" in (broken[1].error or "")
    assert "failed earlier in this run" in (broken[2].error or "")
    assert not any(path("n3") in p for _m, p in apiserver.calls())  # not even read
    assert UNCERT not in apiserver.nodes["n2"]["spec"]["taints"]  # the refused patch: whole

    scan_gate(kubeconfig, scan("n1", "n2", "n3"), T0 + 120)  # the API is back

    assert taken_out_times(apiserver) == {"n1": T0 + 60, "n2": T0 + 120, "n3": T0 + 120}


def test_a_node_the_breaker_holds_is_flagged_not_taken_out_and_spends_no_budget(
    apiserver: FakeApiServer, kubeconfig: str
):
    for i in range(20):
        apiserver.add(node(f"n{i:02d}"))
    why = "breaker open for XID-001: 4 of 5 nodes fail it for the same reason"
    limits = Limits(max_new="1")

    held, taken = scan_gate(kubeconfig, scan("n00", "n01"), T0, limits=limits, hold={"n00": why})

    assert held.held == why and taken.held is None
    stored = apiserver.nodes["n00"]
    assert UNCERT not in stored["spec"]["taints"]
    assert stored["metadata"]["labels"][STATE] == "noncompliant"
    assert stored["metadata"]["annotations"][REASON] == why
    assert (apiserver.condition("n00", "GPUBootCompliant") or {}).get("status") == "False"
    assert apiserver.nodes["n01"]["spec"]["taints"] == [UNCERT]


def test_the_worst_node_gets_the_last_place_in_the_budget(
    apiserver: FakeApiServer, kubeconfig: str
):
    for i in range(20):
        apiserver.add(node(f"n{i:02d}"))
    run = RunReport.from_dict(
        {
            "run_id": "scan",
            "nodes": [
                *[n.to_dict() for n in scan("n00").nodes],
                *[n.to_dict() for n in scan("n01", reason=XID_79).nodes],
            ],
        }
    )

    first, worst = scan_gate(kubeconfig, run, T0, limits=Limits(max_new="1"))

    assert worst.held is None and first.held and "--max-new-takeouts 1" in first.held
    assert [a.node for a in (first, worst)] == ["n00", "n01"]  # reported in report order


# ------------------------------------------------------------------ ownership


def test_a_node_another_remediator_owns_gets_no_action(apiserver: FakeApiServer, kubeconfig: str):
    owned = {
        "key": "node.kubernetes.io/out-of-service",
        "value": "nodeshutdown",
        "effect": "NoExecute",
    }
    apiserver.add(node("n1", taints=[owned]))
    apiserver.add(node("n2", labels={"gpuboot.io/managed": "false"}))

    actions = scan_gate(kubeconfig, scan("n1", "n2"), T0)

    assert apiserver.calls() == [LIST]
    assert all((a.held or "").startswith("left alone: ") for a in actions)
    assert "out-of-service" in (actions[0].held or "")
    assert "gpuboot.io/managed" in (actions[1].held or "")


def test_a_human_uncordon_cancels_the_take_out_and_starts_a_cool_down(
    apiserver: FakeApiServer, kubeconfig: str
):
    apiserver.add(node("n1", annotations={CORDONED_BY: "gpuboot", TAKEN_OUT_AT: str(int(T0))}))
    apiserver.add(node("n2"))  # gpuboot cordoned it (a drain); a human uncordoned it

    [cancel] = scan_gate(kubeconfig, scan("n1"), T0 + 60)

    stored = apiserver.nodes["n1"]
    assert stored["spec"]["taints"] == [] and not stored["spec"].get("unschedulable")
    assert stored["metadata"]["annotations"] == {CANCELLED_AT: str(int(T0 + 60))}
    assert STATE not in stored["metadata"]["labels"]
    assert any("no take-out before" in n for n in cancel.notes) and cancel.held is None
    assert (apiserver.condition("n1", "GPUBootCompliant") or {}).get("status") == "False"

    apiserver.requests.clear()
    [cooling] = scan_gate(kubeconfig, scan("n1"), T0 + 1800)

    assert apiserver.patches() == []  # left alone, only its conditions are current
    assert "cool-down until" in (cooling.held or "")

    [again] = scan_gate(kubeconfig, scan("n1"), T0 + 60 + 3600)

    assert again.held is None
    stored = apiserver.nodes["n1"]
    assert stored["spec"]["taints"] == [UNCERT]
    assert CANCELLED_AT not in stored["metadata"]["annotations"]


def test_removing_gpuboots_taint_by_hand_cancels_too_unless_the_gpu_is_lost(
    apiserver: FakeApiServer, kubeconfig: str
):
    marks = {TAKEN_OUT_AT: str(int(T0)), REASON: "failed: XID-001"}
    apiserver.add(node("n1", labels={STATE: "taken-out"}, annotations=dict(marks)))
    apiserver.add(node("n2", labels={STATE: "taken-out"}, annotations=dict(marks)))

    _quiet, lost = scan_gate(
        kubeconfig,
        RunReport.from_dict(
            {
                "run_id": "scan",
                "nodes": [
                    *[n.to_dict() for n in scan("n1").nodes],
                    *[n.to_dict() for n in scan("n2", reason=XID_79).nodes],
                ],
            }
        ),
        T0 + 60,
    )

    assert apiserver.nodes["n1"]["spec"]["taints"] == []
    assert apiserver.nodes["n1"]["metadata"]["annotations"] == {CANCELLED_AT: str(int(T0 + 60))}
    assert apiserver.nodes["n2"]["spec"]["taints"] == [UNCERT]  # critical: taken out again
    assert any("critical" in n for n in lost.notes)


def test_a_quarantined_node_gets_no_automatic_action(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    apiserver.add(node("gpu-a01", taints=[UNCERT], labels={"gpuboot.io/action": "rma"}))

    [action] = gate(reports.make({"gpu-a01": "PASS"}), kubeconfig)

    assert apiserver.calls() == [LIST]
    assert "gpuboot node release gpu-a01" in (action.held or "")


# ------------------------------------------------------------------ the options


@pytest.mark.parametrize("verb", ["certify", "scan", "install", "remediate"])
@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--max-unavailable", "0"], "--max-unavailable: '0' is not a node count"),
        (["--max-new-takeouts", "120%"], "--max-new-takeouts: '120%' is not a node count"),
        (["--takeout-window", "soon"], "--takeout-window: 'soon' is not a whole number"),
        (["--max-unavailable-per-domain", "2"], "add --domain-label KEY"),
        (["--domain-label", "rack name"], "--domain-label: 'rack name' is not a Kubernetes"),
    ],
)
def test_bad_budget_options_exit_2_before_any_host(
    verb: str,
    flags: list[str],
    says: str,
    kubeconfig: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    from gpuboot import cli, install

    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    node1:\n")

    def touched(*_a: Any, **_k: Any):
        raise AssertionError("the inventory was loaded: a host could have been touched")

    monkeypatch.setattr("gpuboot.inventory.load_inventory", touched)
    monkeypatch.setattr(install, "load_inventory", touched)

    code = cli.main([verb, "-i", str(inventory), "--kubeconfig", kubeconfig, *flags])

    err = capsys.readouterr().err
    assert code == 2, err
    assert says in err and "hint: " in err and "Traceback" not in err


def test_a_certificate_that_is_a_fifo_or_a_link_vouches_for_nothing(tmp_path):
    """The gate reads a certificate as a regular file within its cap: a FIFO would hang
    it, a link could name another node's file."""
    import os
    from datetime import UTC, datetime

    from gpuboot.k8s.decision import read_certificate

    fifo = tmp_path / "node1.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        read_certificate(fifo, "node1", datetime.now(UTC))
    real = tmp_path / "real.json"
    real.write_text('{"host": "node1", "expires_at": "2099-01-01T00:00:00Z"}')
    link = tmp_path / "link.json"
    link.symlink_to(real)
    with pytest.raises(ValueError, match="symbolic link"):
        read_certificate(link, "node1", datetime.now(UTC))
    assert read_certificate(real, "node1", datetime.now(UTC)).doc["host"] == "node1"


def test_a_passing_node_with_an_open_rma_escalation_is_not_let_back_in(tmp_path):
    """After the reboot that cleared its Xid a node passes, but its escalation stays open
    until an operator releases it: the gate leaves it out, saying how to release it."""
    from datetime import UTC, datetime

    from gpuboot.k8s.decision import decide
    from gpuboot.results import Escalation, NodeReport

    esc = Escalation(
        fault="xid:79@0000:3b:00", what="Xid 79", rule="XID-001", boots=3,
        first_seen=None, action="hardware inspection / RMA", new=False,
    )  # fmt: skip
    node = NodeReport(host="n1", verdict="PASS", findings=(), escalations=(esc,))
    target = decide(node, bundle=None, certificate=None, allow_warn=False, now=datetime.now(UTC))
    assert not target.certified and target.error is None
    assert "RMA escalation open (xid:79@0000:3b:00)" in target.leave
    assert "gpuboot node release n1" in target.leave
