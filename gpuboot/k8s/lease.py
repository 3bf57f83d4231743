"""The node's Lease, held while gpuboot drains or remediates it, so remediators take turns.

medik8s (NodeHealthCheck, self-node-remediation, node-maintenance) holds a node through the
Lease ``medik8s-leases/node-<name>``: its lease library (github.com/medik8s/common,
pkg/lease/manager.go) names it ``<kind>-<name>`` lower-cased in the namespace
``medik8s-leases``, creates that namespace when missing, and takes over another holder's
Lease only once it has expired (renewTime + leaseDurationSeconds in the past). gpuboot
follows the same rules on the same object, so neither acts on a node the other holds.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuboot.k8s.client import TIMEOUT, Api

NAMESPACE = "medik8s-leases"
HOLDER = "gpuboot"
DEFAULT_DURATION_S = 3600
ATTEMPTS = 3  # another writer between our read and our write: read again, at most this often


class LeaseHeld(Exception):
    """Another holder has a live Lease on the node: gpuboot defers."""

    def __init__(self, node: str, holder: str, until: datetime | None) -> None:
        self.node, self.holder, self.until = node, holder, until
        when = f" until {until:%Y-%m-%dT%H:%M:%SZ}" if until else ""
        super().__init__(f"{holder} holds the Lease {NAMESPACE}/{lease_name(node)}{when}")


def lease_name(node: str) -> str:
    return f"node-{node}".lower()


def _coordination(api: Api) -> Any:
    if api.coordination is not None:
        return api.coordination
    from kubernetes import client  # an Api built without it: the same connection serves

    return client.CoordinationV1Api(api.core.api_client)


def _stamp(when: datetime) -> datetime:
    # MicroTime: the API server parses exactly six fractional digits, and the client
    # serialises a datetime with isoformat(), which drops a zero fraction: one microsecond
    # keeps it (a string is parsed into a datetime by client 37 before it is sent, so
    # formatting it ourselves would not survive)
    when = when.astimezone(UTC)
    return when if when.microsecond else when.replace(microsecond=1)


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _expiry(spec: dict[str, Any]) -> datetime | None:
    """When the Lease lapses; None when it says nothing to go by (medik8s: not valid)."""
    renewed, duration = _time(spec.get("renewTime")), spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return None
    return renewed + timedelta(seconds=duration)


def _read(api: Api, node: str) -> dict[str, Any] | None:
    try:
        resp = _coordination(api).read_namespaced_lease(
            lease_name(node), NAMESPACE, _preload_content=False, _request_timeout=TIMEOUT
        )
    except api.api_error as exc:
        if getattr(exc, "status", None) == 404:
            return None
        raise
    return json.loads(resp.data)


def _spec(holder: str, duration_s: int, acquired: datetime, now: datetime, moves: int) -> dict:
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration_s,
        "acquireTime": _stamp(acquired),
        "renewTime": _stamp(now),
        "leaseTransitions": moves,
    }


def _create(api: Api, node: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name(node), "namespace": NAMESPACE},
        "spec": spec,
    }
    coordination = _coordination(api)
    try:
        coordination.create_namespaced_lease(
            NAMESPACE, body, _preload_content=False, _request_timeout=TIMEOUT
        )
    except api.api_error as exc:
        if getattr(exc, "status", None) != 404:  # 404: no such namespace yet
            raise
        _create_namespace(api)
        coordination.create_namespaced_lease(
            NAMESPACE, body, _preload_content=False, _request_timeout=TIMEOUT
        )


def _create_namespace(api: Api) -> None:
    try:
        api.core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            _preload_content=False,
            _request_timeout=TIMEOUT,
        )
    except api.api_error as exc:
        if getattr(exc, "status", None) != 409:  # created meanwhile by someone else
            raise


def acquire(
    api: Api,
    node: str,
    *,
    holder: str = HOLDER,
    duration_s: int = DEFAULT_DURATION_S,
    now: datetime | None = None,
) -> None:
    """Hold the node's Lease for ``duration_s`` from ``now``: create it, renew our own, or
    take over one that has expired. LeaseHeld when another holder's Lease is live; the
    client's ApiException when the API server refuses (nothing is held then)."""
    now = now or datetime.now(UTC)
    for attempt in range(ATTEMPTS):
        lease = _read(api, node)
        try:
            if lease is None:
                return _create(api, node, _spec(holder, duration_s, now, now, 0))
            _take(api, node, lease, holder=holder, duration_s=duration_s, now=now)
            return None
        except api.api_error as exc:
            # someone created, changed (409) or deleted (404) the Lease since we read it:
            # judge it afresh
            if getattr(exc, "status", None) not in (404, 409) or attempt == ATTEMPTS - 1:
                raise
    return None


def _take(
    api: Api, node: str, lease: dict[str, Any], *, holder: str, duration_s: int, now: datetime
) -> None:
    spec = lease.get("spec") or {}
    current = spec.get("holderIdentity") or ""
    expiry = _expiry(spec)
    moves = spec.get("leaseTransitions") or 0
    if current == holder:
        acquired = _time(spec.get("acquireTime")) or now
    elif current and expiry is not None and expiry >= now:
        raise LeaseHeld(node, current, expiry)
    else:  # free, expired, or with no time to go by: ours now, one more transition
        acquired, moves = now, moves + 1
    body = {**lease, "spec": {**spec, **_spec(holder, duration_s, acquired, now, moves)}}
    _coordination(api).replace_namespaced_lease(
        lease_name(node), NAMESPACE, body, _preload_content=False, _request_timeout=TIMEOUT
    )


def release(api: Api, node: str, *, holder: str = HOLDER) -> None:
    """Give the node's Lease up if ``holder`` holds it; another holder's is left alone.
    Idempotent: no Lease, nothing to do."""
    for attempt in range(ATTEMPTS):
        lease = _read(api, node)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != holder:
            return
        meta = lease.get("metadata") or {}
        # the resourceVersion just read is a precondition: never delete a Lease someone
        # else took over between our read and our delete
        options = {"preconditions": {"resourceVersion": meta.get("resourceVersion")}}
        try:
            _coordination(api).delete_namespaced_lease(
                lease_name(node),
                NAMESPACE,
                body=options,
                _preload_content=False,
                _request_timeout=TIMEOUT,
            )
            return
        except api.api_error as exc:
            status = getattr(exc, "status", None)
            if status == 404:
                return
            if status != 409 or attempt == ATTEMPTS - 1:
                raise


@contextlib.contextmanager
def held(api: Api, node: str, **kw: Any) -> Iterator[None]:
    """Hold the node's Lease around a step: acquire, run, release (even when the step
    fails). A release the API server refuses does not replace the step's outcome: the
    Lease then lapses on its own after its duration."""
    acquire(api, node, **kw)
    try:
        yield
    finally:
        with contextlib.suppress(api.api_error, *api.transport_errors):
            release(api, node, holder=kw.get("holder", HOLDER))
