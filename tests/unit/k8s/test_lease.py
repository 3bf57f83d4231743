"""The node's Lease against the fake API server (driven by the official client): created
where medik8s looks for it, never taken from a live foreign holder, taken over once
expired, released only when ours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuboot.k8s import lease
from gpuboot.k8s.client import connect
from gpuboot_lab.kubeapi import FakeApiServer, Request

pytest.importorskip("kubernetes")

NOW = datetime(2026, 11, 27, 10, 0, 0, 250000, tzinfo=UTC)
KEY = (lease.NAMESPACE, "node-gpu-a01")


@pytest.fixture
def api(kubeconfig: str):
    return connect(kubeconfig, None)


def stored(apiserver: FakeApiServer) -> dict:
    return apiserver.leases[KEY]["spec"]


def test_acquire_creates_the_medik8s_lease_and_its_namespace(apiserver, api):
    assert lease.NAMESPACE not in apiserver.namespaces

    lease.acquire(api, "gpu-a01", now=NOW, duration_s=600)

    assert stored(apiserver) == {
        "holderIdentity": "gpuboot",
        "leaseDurationSeconds": 600,
        "acquireTime": "2026-11-27T10:00:00.250000Z",
        "renewTime": "2026-11-27T10:00:00.250000Z",
        "leaseTransitions": 0,
    }


def test_a_whole_second_is_still_a_microtime_the_server_accepts(apiserver, api):
    # the client serialises datetime.isoformat(), which drops a zero fraction
    lease.acquire(api, "gpu-a01", now=NOW.replace(microsecond=0))

    assert stored(apiserver)["renewTime"] == "2026-11-27T10:00:00.000001Z"


def test_a_live_foreign_lease_is_left_alone_and_named(apiserver, api):
    apiserver.add_lease(*KEY, "self-node-remediation", renewed=NOW - timedelta(minutes=5))
    before = dict(stored(apiserver))

    with pytest.raises(lease.LeaseHeld) as held:
        lease.acquire(api, "gpu-a01", now=NOW)

    assert held.value.holder == "self-node-remediation"
    assert "medik8s-leases/node-gpu-a01" in str(held.value)
    assert stored(apiserver) == before
    assert not [r for r in apiserver.requests if r.method != "GET"]


def test_an_expired_foreign_lease_is_taken_over(apiserver, api):
    apiserver.add_lease(
        *KEY, "self-node-remediation", renewed=NOW - timedelta(seconds=61), duration_s=60
    )

    lease.acquire(api, "gpu-a01", now=NOW)

    spec = stored(apiserver)
    assert spec["holderIdentity"] == "gpuboot" and spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"] == "2026-11-27T10:00:00.250000Z"


def test_our_own_lease_is_renewed_not_transferred(apiserver, api):
    lease.acquire(api, "gpu-a01", now=NOW)
    lease.acquire(api, "gpu-a01", now=NOW + timedelta(minutes=10))

    spec = stored(apiserver)
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == "2026-11-27T10:00:00.250000Z"
    assert spec["renewTime"] == "2026-11-27T10:10:00.250000Z"


def test_a_conflict_between_read_and_write_is_judged_afresh(apiserver, api):
    apiserver.add_lease(*KEY, "nhc", renewed=NOW - timedelta(hours=2), duration_s=60)
    apiserver.conflict_storm(1, path="/leases/")

    lease.acquire(api, "gpu-a01", now=NOW)

    assert stored(apiserver)["holderIdentity"] == "gpuboot"


def test_release_deletes_only_our_own_lease_and_is_idempotent(apiserver, api):
    apiserver.add_lease(*KEY, "node-maintenance", renewed=NOW)
    lease.release(api, "gpu-a01")
    assert stored(apiserver)["holderIdentity"] == "node-maintenance"

    del apiserver.leases[KEY]
    lease.acquire(api, "gpu-a01", now=NOW)
    lease.release(api, "gpu-a01")
    assert KEY not in apiserver.leases
    lease.release(api, "gpu-a01")  # nothing left: nothing to do


def test_release_never_deletes_a_lease_taken_over_after_our_read(apiserver, api):
    lease.acquire(api, "gpu-a01", now=NOW)

    def takeover(req: Request) -> None:  # another remediator, just before our DELETE
        if req.method == "DELETE":
            apiserver.before_request = None
            apiserver.add_lease(*KEY, "self-node-remediation", renewed=NOW)

    apiserver.before_request = takeover
    lease.release(api, "gpu-a01")

    assert stored(apiserver)["holderIdentity"] == "self-node-remediation"


def test_held_releases_even_when_the_step_fails(apiserver, api):
    with pytest.raises(RuntimeError), lease.held(api, "gpu-a01", now=NOW):
        assert stored(apiserver)["holderIdentity"] == "gpuboot"
        raise RuntimeError("reboot broke")

    assert KEY not in apiserver.leases


def test_held_runs_nothing_when_another_holder_has_it(apiserver, api):
    apiserver.add_lease(*KEY, "self-node-remediation", renewed=NOW)
    ran = []

    with pytest.raises(lease.LeaseHeld), lease.held(api, "gpu-a01", now=NOW):
        ran.append(True)

    assert ran == [] and stored(apiserver)["holderIdentity"] == "self-node-remediation"


def test_the_api_failing_holds_nothing(apiserver, api):
    apiserver.inject(500, path="/leases")

    with pytest.raises(api.api_error) as err:
        lease.acquire(api, "gpu-a01", now=NOW)

    assert err.value.status == 500 and apiserver.leases == {}
