"""install's drain against the fake API server: the exact requests, and what is left."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuboot.k8s import apply_gate
from gpuboot.k8s.budget import Limits
from gpuboot.k8s.drain import drain
from gpuboot_lab.kubeapi import FakeApiServer, node, pod

from .conftest import NOW, Reports, gate_args

if importlib.util.find_spec("kubernetes") is None:
    if os.environ.get("CI"):
        raise RuntimeError("the kubernetes client is missing on CI: install gpuboot[k8s]")
    pytest.skip("the k8s extra (kubernetes client) is not installed", allow_module_level=True)

UNCERT = {"key": "gpuboot.io/uncertified", "value": "true", "effect": "NoSchedule"}
CERTIFIED, SHA = "gpuboot.io/certified", "gpuboot.io/cert-sha256"
CORDONED_BY = "gpuboot.io/cordoned-by"


class FakeTime:
    """clock/sleep for drain: sleeping advances the clock, and can run a hook."""

    def __init__(self) -> None:
        self.now = 0.0
        self.on_sleep = None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep:
            self.on_sleep(self.now)


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


# a budget that never binds, for the cases about something else
OPEN = Limits(max_unavailable="100%", max_new="100%")


def run(kubeconfig: str, hosts: list[str], fake_time: FakeTime, **kw):
    return drain(
        hosts,
        kubeconfig=kubeconfig,
        timeout_s=kw.pop("timeout_s", 60),
        poll_s=2,
        clock=fake_time.clock,
        sleep=fake_time.sleep,
        limits=kw.pop("limits", OPEN),
        **kw,
    )


def test_cordons_uncertifies_and_evicts_only_what_kubectl_drain_would(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    apiserver.add(node("gpu-a01", labels={CERTIFIED: "true", SHA: "abc"}))
    for doc in (
        pod("train-0", "gpu-a01", namespace="ml", owner="StatefulSet"),
        pod("web-1", "gpu-a01"),
        pod("dcgm-exporter-x", "gpu-a01", owner="DaemonSet"),
        pod("kube-proxy-gpu-a01", "gpu-a01", owner=None, mirror=True),
        pod("job-done", "gpu-a01", owner="Job", phase="Succeeded"),
        pod("web-2", "gpu-a02"),  # another node's
    ):
        apiserver.add_pod(doc)

    result = run(kubeconfig, ["gpu-a01"], fake_time)["gpu-a01"]

    assert result.error is None and result.member
    assert sorted(result.evicted) == ["default/web-1", "ml/train-0"]
    assert sorted(apiserver.evictions()) == ["default/web-1", "ml/train-0"]
    stored = apiserver.nodes["gpu-a01"]
    assert stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"][CORDONED_BY] == "gpuboot"  # so certify may lift it
    assert UNCERT in stored["spec"]["taints"]
    assert stored["metadata"]["labels"][CERTIFIED] == "false"
    assert SHA not in stored["metadata"]["labels"]  # the old certificate no longer applies
    left = {name for (_, name) in apiserver.pods}
    assert left == {"dcgm-exporter-x", "kube-proxy-gpu-a01", "job-done", "web-2"}
    # one PATCH (the cordon), pods listed by node only
    assert [c for c in apiserver.calls() if c[0] == "PATCH"] == [("PATCH", "/api/v1/nodes/gpu-a01")]
    assert all(
        r.query.get("fieldSelector") == ["spec.nodeName=gpu-a01"]
        for r in apiserver.requests
        if r.path == "/api/v1/pods"
    )


def test_waits_for_evicted_pods_to_terminate(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    apiserver.add(node("gpu-a01"))
    apiserver.add_pod(pod("web-1", "gpu-a01"))
    apiserver.terminating_lists = 3  # still listed (terminating) three more times

    result = run(kubeconfig, ["gpu-a01"], fake_time)["gpu-a01"]

    assert result.error is None
    assert apiserver.evictions() == ["default/web-1"]  # asked once, not once per poll
    assert fake_time.now == 8  # listed three more times while terminating, gone at the 4th poll
    assert apiserver.pods == {}


def test_a_pod_disruption_budget_holds_the_node_until_the_timeout(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    apiserver.add(node("gpu-a01"))
    apiserver.add(node("gpu-a02"))
    apiserver.add_pod(pod("db-0", "gpu-a01", owner="StatefulSet"))
    apiserver.add_pod(pod("web-1", "gpu-a02"))
    apiserver.pdb_blocked.add(("default", "db-0"))

    results = run(kubeconfig, ["gpu-a01", "gpu-a02"], fake_time, timeout_s=30)

    blocked = results["gpu-a01"]
    assert blocked.error == (
        "drain timed out after 30 s; still on the node: "
        "default/db-0 (eviction refused by a PodDisruptionBudget (429))"
    )
    assert apiserver.nodes["gpu-a01"]["spec"]["unschedulable"] is True  # kubectl leaves it so
    assert results["gpu-a02"].error is None and results["gpu-a02"].evicted == ["default/web-1"]
    assert fake_time.now >= 30


def test_an_eviction_allowed_later_completes_the_drain(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    apiserver.add(node("gpu-a01"))
    apiserver.add_pod(pod("db-0", "gpu-a01", owner="StatefulSet"))
    apiserver.pdb_blocked.add(("default", "db-0"))
    fake_time.on_sleep = lambda now: now >= 10 and apiserver.pdb_blocked.clear()

    result = run(kubeconfig, ["gpu-a01"], fake_time)["gpu-a01"]

    assert result.error is None and result.evicted == ["default/db-0"]
    assert apiserver.evictions().count("default/db-0") > 1  # retried while refused


def test_a_host_the_cluster_does_not_know_is_left_alone(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    result = run(kubeconfig, ["node9"], fake_time)["node9"]
    assert not result.member and result.error is None and result.evicted == []
    assert apiserver.calls() == [("GET", "/api/v1/nodes")]  # not in the list: never asked for


def test_inventory_names_map_to_node_names(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    apiserver.add(node("gpu-a01.dc1"))
    apiserver.add_pod(pod("web-1", "gpu-a01.dc1"))
    result = run(kubeconfig, ["node1"], fake_time, node_names={"node1": "gpu-a01.dc1"})["node1"]
    assert result.node == "gpu-a01.dc1" and result.evicted == ["default/web-1"]


def test_the_node_returns_only_once_it_certifies_again(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime, reports: Reports
):
    apiserver.add(node("gpu-a01"))
    run(kubeconfig, ["gpu-a01"], fake_time)

    failed = reports.make({"gpu-a01": "FAIL"})
    judged, certs = gate_args(failed)
    apply_gate(judged, certificates=certs, kubeconfig=kubeconfig, now=NOW, limits=OPEN)
    assert apiserver.nodes["gpu-a01"]["spec"]["unschedulable"] is True

    passed = reports.make({"gpu-a01": "PASS"})
    judged, certs = gate_args(passed)
    apply_gate(judged, certificates=certs, kubeconfig=kubeconfig, now=NOW, limits=OPEN)
    stored = apiserver.nodes["gpu-a01"]
    assert "unschedulable" not in stored["spec"]
    assert UNCERT not in stored["spec"]["taints"]
    assert CORDONED_BY not in stored["metadata"]["annotations"]


# ------------------------------------------------------------------ the disruption gate


def test_a_node_the_budget_holds_back_is_neither_cordoned_nor_drained(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    for name in ("gpu-a01", "gpu-a02", "gpu-a03"):
        apiserver.add(node(name))
        apiserver.add_pod(pod(f"web-{name}", name))
    apiserver.add(node("gpu-a04", unschedulable=True))  # another tool's cordon counts too

    results = run(
        kubeconfig,
        ["gpu-a01", "gpu-a02", "gpu-a03"],
        fake_time,
        limits=Limits(max_unavailable="2", max_new="100%"),
    )

    assert results["gpu-a01"].held is None and results["gpu-a01"].evicted == ["default/web-gpu-a01"]
    for name in ("gpu-a02", "gpu-a03"):
        assert results[name].held == "held back: 2 of 4 nodes unavailable, --max-unavailable 2"
        assert results[name].error is None and results[name].evicted == []
        assert not apiserver.nodes[name]["spec"].get("unschedulable")
    assert [c for c in apiserver.calls() if c[0] == "PATCH"] == [("PATCH", "/api/v1/nodes/gpu-a01")]


def test_a_node_another_remediator_owns_is_not_drained(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    apiserver.add(node("gpu-a01", labels={"gpuboot.io/managed": "false"}))
    apiserver.add(node("gpu-a02"))
    apiserver.add_pod(pod("web-1", "gpu-a01"))
    limits = Limits(max_unavailable="1", max_new="100%")

    results = run(kubeconfig, ["gpu-a01", "gpu-a02"], fake_time, limits=limits)

    owned = results["gpu-a01"].held or ""
    assert owned.startswith("left alone: ") and "gpuboot.io/managed" in owned
    assert results["gpu-a02"].held is None  # the node left alone took no place in the budget
    assert [c for c in apiserver.calls() if c[0] == "PATCH"] == [("PATCH", "/api/v1/nodes/gpu-a02")]
    assert apiserver.evictions() == []


def test_an_api_server_failing_before_the_list_touches_nothing(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    apiserver.add(node("gpu-a01"))
    apiserver.inject(500, path=r"^/api/v1/nodes$", times=1)

    result = run(kubeconfig, ["gpu-a01"], fake_time)["gpu-a01"]

    assert "cannot list the nodes" in (result.error or "") and "500" in result.error
    assert apiserver.calls("PATCH") == [] and apiserver.evictions() == []


def test_an_api_server_failing_mid_batch_stops_the_next_cordons(
    apiserver: FakeApiServer, kubeconfig: str, fake_time: FakeTime
):
    for name in ("gpu-a01", "gpu-a02", "gpu-a03"):
        apiserver.add(node(name))
    apiserver.inject(503, path="^/api/v1/nodes/gpu-a02$", method="PATCH")

    results = run(kubeconfig, ["gpu-a01", "gpu-a02", "gpu-a03"], fake_time)

    assert results["gpu-a01"].error is None
    assert "503" in (results["gpu-a02"].error or "")
    assert "failed earlier in this run" in (results["gpu-a03"].error or "")
    assert ("GET", "/api/v1/nodes/gpu-a03") not in apiserver.calls()
    assert not apiserver.nodes["gpu-a03"]["spec"].get("unschedulable")


def test_install_leaves_a_held_node_pending_and_says_how_to_go_on(
    apiserver: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    from gpuboot import install
    from gpuboot.rollout import RolloutState
    from gpuboot.runner import HostResult

    apiserver.add(node("gpu-a01"))
    apiserver.add(node("gpu-a02"))
    monkeypatch.setattr(install, "read_stack_changes", lambda _inv, batch: (list(batch), {}))
    inv = SimpleNamespace(path=tmp_path / "hosts.yml", k8s_node_names=dict)
    hosts = ["gpu-a01", "gpu-a02"]
    state = RolloutState(inventory=str(inv.path), hosts=hosts, batch_size=2, budget=None)
    result = install.InstallResult(
        "run-1", tmp_path, 0.0, {h: HostResult(host=h, pending=True) for h in hosts}, state
    )
    limits = Limits(max_unavailable="1", max_new="100%")

    batch = install._drain_batch(inv, hosts, install.Drain(kubeconfig, limits=limits), result)

    assert batch == ["gpu-a01"]
    held = result.hosts["gpu-a02"]
    assert held.pending and held.status == "pending" and state.pending == hosts
    assert held.reason == (
        "gpu-a02: held back: 1 of 2 nodes unavailable, --max-unavailable 1; re-run when nodes "
        f"are back: gpuboot install -i {inv.path} --resume run-1"
    )


def test_install_neither_drains_nor_installs_a_host_whose_executor_was_lost_at_its_read(
    apiserver: FakeApiServer, kubeconfig: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    # its install would run on the same lost executor: draining it takes it out for nothing
    from gpuboot import install
    from gpuboot.rollout import RolloutState
    from gpuboot.runner import HostResult

    apiserver.add(node("gpu-a01"))
    apiserver.add(node("gpu-b01"))
    lost = {"gpu-b01": "not read: executor ex-b lost: stream cut"}
    monkeypatch.setattr(install, "read_stack_changes", lambda _inv, batch: (["gpu-a01"], lost))
    inv = SimpleNamespace(path=tmp_path / "hosts.yml", k8s_node_names=dict)
    hosts = ["gpu-a01", "gpu-b01"]
    state = RolloutState(inventory=str(inv.path), hosts=hosts, batch_size=2, budget=None)
    result = install.InstallResult(
        "run-1", tmp_path, 0.0, {h: HostResult(host=h, pending=True) for h in hosts}, state
    )

    batch = install._drain_batch(inv, hosts, install.Drain(kubeconfig), result)

    assert batch == ["gpu-a01"]
    assert not apiserver.nodes["gpu-b01"]["spec"].get("unschedulable")
    assert apiserver.nodes["gpu-a01"]["spec"].get("unschedulable")
    unknown = result.hosts["gpu-b01"]
    assert unknown.status == "unknown" and state.unknown == ["gpu-b01"]
    assert unknown.reason == (
        "not read: executor ex-b lost: stream cut; once it is back: "
        f"gpuboot install -i {inv.path} --resume run-1"
    )
