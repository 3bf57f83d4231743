"""The join gate's RDMA labels: set on a node whose RDM rules passed for its
gpuboot_rdma_cni, removed from one that fails them or is taken out, absent without pod RDMA."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from gpuboot.k8s import apply_gate
from gpuboot.k8s.budget import Limits
from gpuboot.k8s.rdma_labels import rdma_labels
from gpuboot.results import NodeReport
from gpuboot_lab.kubeapi import FakeApiServer, node

from .conftest import NOW, Reports, finding, gate_args, with_catalogue

MODE, RAILS, VFS = "gpuboot.io/rdma-mode", "gpuboot.io/rdma-rails", "gpuboot.io/rdma-vfs-per-rail"
SRIOV = {"gpuboot_profile": "hgx-h100-sxm-8gpu", "gpuboot_rdma_cni": "sriov", "gpuboot_rdma_vfs": 8}
OPEN = Limits(max_unavailable="100%", max_new="100%")
needs_k8s = pytest.mark.skipif(
    importlib.util.find_spec("kubernetes") is None, reason="the k8s extra is not installed"
)


def _node(statuses: dict[str, str]) -> NodeReport:
    return NodeReport.from_dict(
        {"host": "n1", "verdict": "PASS",
         "findings": with_catalogue([finding(r, s) for r, s in statuses.items()])}
    )  # fmt: skip


def test_passed_rdm_rules_label_the_mode_rails_and_vfs():
    assert rdma_labels(_node({}), SRIOV) == {MODE: "sriov", RAILS: "8", VFS: "8"}


def test_shared_mode_has_no_vf_count():
    pins = {**SRIOV, "gpuboot_rdma_cni": "shared"}
    skipped = {"RDM-001": "SKIPPED", "RDM-006": "SKIPPED"}
    node_ = NodeReport.from_dict(
        {"host": "n1", "verdict": "PASS", "findings": with_catalogue(
            [{**finding(r, s), "applicable": False} for r, s in skipped.items()])}
    )  # fmt: skip
    assert rdma_labels(node_, pins) == {MODE: "shared", RAILS: "8", VFS: None}


@pytest.mark.parametrize(
    ("statuses", "pins"),
    [
        ({"RDM-003": "FAIL"}, SRIOV),
        ({"RDM-005": "ERROR"}, SRIOV),  # not judged: nothing vouched for
        ({}, {**SRIOV, "gpuboot_rdma_cni": "none"}),
        ({}, {}),  # a bundle that recorded no pod RDMA
    ],
)
def test_labels_are_removed_where_the_rules_did_not_all_pass(statuses, pins):
    assert rdma_labels(_node(statuses), pins) == {MODE: None, RAILS: None, VFS: None}


def test_a_run_that_judged_no_rdm_rule_leaves_the_labels_alone():
    plain = NodeReport.from_dict(
        {"host": "n1", "verdict": "PASS", "findings": [finding("GPU-001", "PASS")]}
    )
    assert rdma_labels(plain, SRIOV) == {}


@needs_k8s
def test_the_gate_labels_a_certified_node_and_unlabels_a_failing_one(
    apiserver: FakeApiServer, kubeconfig: str, reports: Reports
):
    stale = {MODE: "sriov", RAILS: "8", VFS: "8"}
    apiserver.add(node("gpu-a01", labels={}))
    apiserver.add(node("gpu-a02", labels=stale))
    report: dict[str, Any] = reports.make(
        {"gpu-a01": "PASS", "gpu-a02": "FAIL"},
        findings={"gpu-a02": [finding("RDM-001", "FAIL")]},
        pins={"gpu-a01": SRIOV, "gpu-a02": SRIOV},
    )
    run, certs = gate_args(report)
    actions = apply_gate(run, certificates=certs, kubeconfig=kubeconfig, now=NOW, limits=OPEN)
    assert [a.error for a in actions] == [None, None]
    labels = {n: apiserver.nodes[n]["metadata"]["labels"] for n in ("gpu-a01", "gpu-a02")}
    assert {k: labels["gpu-a01"].get(k) for k in stale} == stale
    assert not set(stale) & set(labels["gpu-a02"])
