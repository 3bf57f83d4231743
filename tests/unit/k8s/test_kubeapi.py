"""The fake API server, driven by the official kubernetes client: it must answer as the real
server does where gpuboot's safety depends on it (conflicts, the status subresource, Lease
semantics, disruption budgets, injected faults)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from gpuboot_lab.kubeapi import FakeApiServer, node, pod

client = pytest.importorskip("kubernetes.client")
config = pytest.importorskip("kubernetes.config")
ApiException = client.exceptions.ApiException

NS = "medik8s-leases"
RENEWED = datetime(2026, 11, 27, 10, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
def core(apiserver: FakeApiServer, kubeconfig: str):
    return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))


@pytest.fixture
def leases(core):
    return client.CoordinationV1Api(core.api_client)


def lease_body(name: str, holder: str, *, rv: str | None = None, stamp: str | None = None):
    stamp = stamp or RENEWED.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    meta = {"name": name, **({"resourceVersion": rv} if rv else {})}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 60,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }


# ------------------------------------------------------------------ nodes
def test_a_patch_on_a_stale_resource_version_is_a_409_and_stores_nothing(apiserver, core):
    apiserver.add(node("gpu-a01"))
    apiserver.touch("gpu-a01", team="infra")  # someone else wrote after our read at "100"

    with pytest.raises(ApiException) as err:
        core.patch_node("gpu-a01", {"metadata": {"resourceVersion": "100", "labels": {"x": "1"}}})

    assert err.value.status == 409
    assert "x" not in apiserver.nodes["gpu-a01"]["metadata"]["labels"]


def test_a_patch_on_the_current_resource_version_is_stored_and_bumps_it(apiserver, core):
    apiserver.add(node("gpu-a01"))

    got = core.patch_node("gpu-a01", {"metadata": {"resourceVersion": "100", "labels": {"x": "1"}}})

    assert got.metadata.labels["x"] == "1"
    assert got.metadata.resource_version not in ("100", None)
    assert (
        apiserver.nodes["gpu-a01"]["metadata"]["resourceVersion"] == got.metadata.resource_version
    )


def test_the_main_resource_ignores_status_and_the_status_subresource_stores_only_status(
    apiserver, core
):
    apiserver.add(node("gpu-a01"))
    cond = {"type": "GPUBootCertified", "status": "True", "reason": "Certified"}

    core.patch_node("gpu-a01", {"status": {"conditions": [cond]}})
    assert apiserver.condition("gpu-a01", "GPUBootCertified") is None

    core.patch_node_status(
        "gpu-a01", {"metadata": {"labels": {"sneaky": "yes"}}, "status": {"conditions": [cond]}}
    )
    stored = apiserver.nodes["gpu-a01"]
    assert "sneaky" not in stored["metadata"]["labels"]
    # strategic merge on the merge key "type": Ready is kept, ours is added
    assert [c["type"] for c in stored["status"]["conditions"]] == ["Ready", "GPUBootCertified"]
    assert apiserver.status_patches("gpu-a01") and not apiserver.patches("gpu-a01")[1:]


def test_conditions_merge_by_type_under_strategic_merge_and_are_replaced_by_a_merge_patch(
    apiserver, core
):
    apiserver.add(node("gpu-a01"))
    cond = {"type": "Ready", "status": "False", "reason": "KubeletNotReady"}

    core.patch_node_status("gpu-a01", {"status": {"conditions": [{"type": "X", "status": "True"}]}})
    core.patch_node_status("gpu-a01", {"status": {"conditions": [cond]}})
    assert apiserver.nodes["gpu-a01"]["status"]["conditions"] == [
        cond,
        {"type": "X", "status": "True"},
    ]

    core.patch_node_status(
        "gpu-a01",
        {"status": {"conditions": [cond]}},
        _content_type="application/merge-patch+json",
    )
    assert apiserver.nodes["gpu-a01"]["status"]["conditions"] == [cond]


@pytest.mark.parametrize(
    "taints",
    [
        [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "x", "effect": "NoSchedule"}],
        [{"key": "a", "effect": "Sometimes"}],
        [{"key": "bad key!", "effect": "NoSchedule"}],
    ],
)
def test_taints_the_real_server_refuses_are_a_422(apiserver, core, taints):
    apiserver.add(node("gpu-a01"))

    with pytest.raises(ApiException) as err:
        core.patch_node("gpu-a01", {"spec": {"taints": taints}})

    assert err.value.status == 422 and apiserver.nodes["gpu-a01"]["spec"]["taints"] == []


def test_a_bug_of_the_fake_is_a_500_and_recorded_never_an_api_outage(apiserver, core):
    apiserver.before_request = lambda req: 1 / 0

    with pytest.raises(ApiException) as err:
        core.list_node()

    assert err.value.status == 500 and "ZeroDivisionError" in apiserver.crashes[0]
    apiserver.crashes.clear()  # seen: the fixture would fail the test on it otherwise


def test_list_nodes_honours_the_label_selector(apiserver, core):
    apiserver.add(node("a", labels={"pool": "h100", "rack": "r1"}))
    apiserver.add(node("b", labels={"pool": "h100", "rack": "r2"}))
    apiserver.add(node("c", labels={"pool": "a100"}))

    def names(selector: str) -> list[str]:
        return [n.metadata.name for n in core.list_node(label_selector=selector).items]

    assert names("pool=h100") == ["a", "b"]
    assert names("pool=h100,rack!=r1") == ["b"]
    assert names("rack in (r1, r9)") == ["a"]
    assert names("!rack") == ["c"]
    assert names("") == ["a", "b", "c"]


def test_list_nodes_honours_the_field_selector_and_refuses_what_it_cannot_serve(apiserver, core):
    apiserver.add(node("a"))
    apiserver.add(node("b", unschedulable=True))

    def names(selector: str) -> list[str]:
        return [n.metadata.name for n in core.list_node(field_selector=selector).items]

    assert names("spec.unschedulable=true") == ["b"]
    assert names("spec.unschedulable!=true,metadata.name=a") == ["a"]
    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="status.phase=Running")
    assert err.value.status == 400


def test_set_ready_is_seen_by_the_client(apiserver, core):
    apiserver.add(node("gpu-a01"))
    apiserver.set_ready("gpu-a01", "Unknown", reason="NodeStatusUnknown")

    [ready] = core.read_node("gpu-a01").status.conditions
    assert (ready.type, ready.status, ready.reason) == ("Ready", "Unknown", "NodeStatusUnknown")


# ------------------------------------------------------------------ leases
def test_lease_create_conflicts_and_replace(apiserver, leases):
    apiserver.namespaces.add(NS)

    created = leases.create_namespaced_lease(NS, lease_body("node-a", "gpuboot"))
    assert created.spec.holder_identity == "gpuboot"

    with pytest.raises(ApiException) as again:
        leases.create_namespaced_lease(NS, lease_body("node-a", "someone-else"))
    assert again.value.status == 409 and "AlreadyExists" in again.value.body

    rv = created.metadata.resource_version
    replaced = leases.replace_namespaced_lease("node-a", NS, lease_body("node-a", "x", rv=rv))
    assert replaced.spec.holder_identity == "x" and replaced.metadata.resource_version != rv

    with pytest.raises(ApiException) as stale:  # the rv we read before our own replace
        leases.replace_namespaced_lease("node-a", NS, lease_body("node-a", "y", rv=rv))
    assert stale.value.status == 409
    assert apiserver.leases[(NS, "node-a")]["spec"]["holderIdentity"] == "x"

    leases.delete_namespaced_lease("node-a", NS)
    with pytest.raises(ApiException) as gone:
        leases.read_namespaced_lease("node-a", NS)
    assert gone.value.status == 404


def test_a_lease_in_a_namespace_that_does_not_exist_is_404(leases):
    with pytest.raises(ApiException) as err:
        leases.create_namespaced_lease(NS, lease_body("node-a", "gpuboot"))
    assert err.value.status == 404 and f'namespaces \\"{NS}\\" not found' in err.value.body


def test_microtime_without_six_fractional_digits_is_refused_as_the_real_server_does(
    apiserver, leases
):
    apiserver.namespaces.add(NS)
    with pytest.raises(ApiException) as err:  # what datetime.isoformat() gives at .000000
        leases.create_namespaced_lease(
            NS, lease_body("node-a", "gpuboot", stamp="2026-11-27T10:00:00+00:00")
        )
    assert err.value.status == 400

    leases.create_namespaced_lease(
        NS, lease_body("node-a", "gpuboot", stamp="2026-11-27T11:00:00.000001+01:00")
    )
    assert apiserver.leases[(NS, "node-a")]["spec"]["renewTime"] == "2026-11-27T10:00:00.000001Z"


# ------------------------------------------------------------------ events
def test_events_of_both_apis_are_stored_and_listed(apiserver, core, kubeconfig):
    events = client.EventsV1Api(core.api_client)
    core.create_namespaced_event(
        "default",
        {
            "metadata": {"generateName": "gpu-a01."},
            "involvedObject": {"kind": "Node", "name": "gpu-a01"},
            "reason": "TakenOut",
            "message": "XID-079",
            "type": "Warning",
        },
    )
    body = {
        "metadata": {"name": "gpu-a01.2"},
        "eventTime": RENEWED.isoformat(),
        "reportingController": "gpuboot.io/gpuboot",
        "reportingInstance": "controller",
        "action": "Remediate",
        "reason": "Rebooted",
        "regarding": {"kind": "Node", "name": "gpu-a01"},
    }
    events.create_namespaced_event("default", body)
    with pytest.raises(ApiException) as err:
        events.create_namespaced_event("default", {**body, "metadata": {"name": "x"}, "action": ""})
    assert err.value.status == 422

    assert [e.reason for e in core.list_namespaced_event("default").items] == [
        "TakenOut",
        "Rebooted",
    ]
    listed = core.list_namespaced_event("default", field_selector="reason=Rebooted").items
    assert [(e.involved_object.name, e.reporting_component) for e in listed] == [
        ("gpu-a01", "gpuboot.io/gpuboot")
    ]
    assert [e["apiVersion"] for e in apiserver.events] == ["v1", "events.k8s.io/v1"]
    raw = events.list_namespaced_event("default", _preload_content=False)
    assert [e["regarding"]["name"] for e in json.loads(raw.data)["items"]] == ["gpu-a01"] * 2


# ------------------------------------------------------------------ evictions
def test_a_pod_disruption_budget_allows_max_unavailable_evictions_then_429(apiserver, core):
    for i in range(3):
        apiserver.add_pod(pod(f"db-{i}", "gpu-a01", labels={"app": "db"}))
    apiserver.add_pdb("default", {"app": "db"}, max_unavailable=1)

    def evict(name: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
        core.create_namespaced_pod_eviction(name, "default", body)

    evict("db-0")
    with pytest.raises(ApiException) as err:  # db-0 is still terminating: budget spent
        evict("db-1")
    assert err.value.status == 429
    apiserver.add_pod(pod("db-3", "gpu-a01", labels={"app": "db"}, phase="Pending"))
    evict("db-3")  # a pod that is not running disrupts nothing: no budget applies


# ------------------------------------------------------------------ faults
def test_an_injected_500_is_an_api_exception_for_the_client_for_n_requests(apiserver, core):
    apiserver.add(node("gpu-a01"))
    apiserver.inject(500, times=2, path=r"^/api/v1/nodes/", method="GET")

    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.read_node("gpu-a01")
        assert err.value.status == 500
    assert core.read_node("gpu-a01").metadata.name == "gpu-a01"


def test_a_fault_until_a_clock_value_ends_then(apiserver, core):
    now = [0.0]
    apiserver.clock = lambda: now[0]
    apiserver.add(node("gpu-a01"))
    apiserver.inject(503, until=60.0)

    with pytest.raises(ApiException) as err:
        core.list_node()
    assert err.value.status == 503
    now[0] = 60.0
    assert [n.metadata.name for n in core.list_node().items] == ["gpu-a01"]


def test_a_conflict_storm_answers_the_next_writes_409_and_reads_normally(apiserver, core):
    apiserver.add(node("gpu-a01"))
    apiserver.conflict_storm(2)

    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.patch_node("gpu-a01", {"metadata": {"labels": {"x": "1"}}})
        assert err.value.status == 409
        core.read_node("gpu-a01")  # reads are not writes: no conflict
    assert core.patch_node("gpu-a01", {"metadata": {"labels": {"x": "1"}}}).metadata.labels["x"]


def test_latency_delays_the_answer(apiserver, core):
    apiserver.add(node("gpu-a01"))
    apiserver.inject(None, times=1, delay_s=0.3)

    start = time.monotonic()
    core.read_node("gpu-a01")
    assert time.monotonic() - start >= 0.3
