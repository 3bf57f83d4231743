"""A stand-in kube-apiserver for tests, faithful where gpuboot's safety depends on it.

No real kube-apiserver installs from PyPI, npm or Debian here, so tests drive this one with
the official ``kubernetes`` client. It speaks HTTP on 127.0.0.1 (random port, one thread
per request) with bearer-token auth, records every request, and behaves as the real server
does on the points gpuboot relies on:

- Nodes: ``GET /api/v1/nodes`` (labelSelector, fieldSelector ``metadata.name`` and
  ``spec.unschedulable``), ``GET``/``PATCH /api/v1/nodes/{name}`` and the status
  subresource ``GET``/``PATCH /api/v1/nodes/{name}/status``. A PATCH of the node ignores
  ``status``; a PATCH of ``/status`` stores only ``status``. Strategic merge patches merge
  ``status.conditions`` (and ``status.addresses``) by their merge key ``type`` and honour
  ``$patch: delete``; JSON merge patches replace every list; other lists (``spec.taints``)
  are replaced whole by both. A ``metadata.resourceVersion`` in the patch is a
  precondition (409 Conflict when stale); ``dryRun=All`` validates and stores nothing;
  label keys and values are validated (422).
- Leases (``coordination.k8s.io/v1``): create (409 AlreadyExists), get, list, replace (409
  on a stale resourceVersion, unconditional without one) and delete (409 on a stale
  precondition). ``acquireTime``/``renewTime`` are MicroTime: the real server parses them
  with exactly six fractional digits and answers 400 otherwise, so this one does too.
- Events: ``/api/v1`` and ``events.k8s.io/v1``, created and listed; ``events`` keeps them.
- Namespaces: objects live only in namespaces that exist (404 otherwise).
- Pods and evictions: ``GET /api/v1/pods?fieldSelector=spec.nodeName=N`` and
  ``POST .../pods/{name}/eviction``: 201 accepted, 429 while a PodDisruptionBudget
  (``add_pdb``) would be violated or the pod is in ``pdb_blocked``, 500 when two budgets
  cover one pod, 404 for no such pod. An evicted pod terminates: still listed, with a
  deletionTimestamp, for ``terminating_lists`` more listings.
- Faults: ``inject`` answers matching requests with an error status and/or after a delay,
  for a number of requests or until a clock value; ``conflict_storm`` answers the next
  writes 409.

resourceVersion is one counter for every kind (as etcd's revision), bumped on each stored
change; a write that changes nothing keeps it. ``before_request`` and ``before_patch`` let a
test act as another writer between a client's read and its write. What the server does to
a request's body (merge patches, selectors, MicroTime, Status errors) is
gpuboot_lab.apimachinery.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from gpuboot_lab.apimachinery import (
    ApiError,
    conflict,
    field_matcher,
    invalid_labels,
    invalid_taints,
    json_merge,
    label_matcher,
    microtime,
    now_rfc3339,
    status_doc,
    strategic_merge,
)

TOKEN = "gpuboot-test-token"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_MERGE = "application/merge-patch+json"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
LEASES = "leases.coordination.k8s.io"
# the fields each list serves a fieldSelector on (a subset of the real server's)
NODE_FIELDS = ("metadata.name", "spec.unschedulable")
POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")
EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.uid",
    "reason",
    "reportingComponent",
    "type",
)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any  # parsed JSON, or None
    authorization: str | None


@dataclass
class Fault:
    """Answers matching requests with ``status`` (None: answers normally) after ``delay_s``."""

    status: int | None
    method: tuple[str, ...] | None  # None: every method
    path: re.Pattern[str] | None  # searched in the request path; None: every path
    times: int | None  # requests it still answers; None: no count
    until: float | None  # the server clock's value it ends at; None: no end
    delay_s: float = 0.0

    def matches(self, req: Request, now: float) -> bool:
        return (
            (self.until is None or now < self.until)
            and (self.times is None or self.times > 0)
            and (self.method is None or req.method in self.method)
            and (self.path is None or bool(self.path.search(req.path)))
        )


def node(
    name: str,
    *,
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    unschedulable: bool = False,
    ready: str = "True",
    resource_version: str = "100",
) -> dict[str, Any]:
    """A Node as the API server stores it (only the fields that matter here)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": resource_version,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {"taints": list(taints or [])},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }
    if unschedulable:
        doc["spec"]["unschedulable"] = True
    return doc


def pod(
    name: str,
    node_name: str,
    *,
    namespace: str = "default",
    owner: str | None = "ReplicaSet",
    mirror: bool = False,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod bound to ``node_name``, owned by a controller of kind ``owner``."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "annotations": {},
    }
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": f"{name}-owner", "controller": True}]
    if mirror:
        meta["annotations"]["kubernetes.io/config.mirror"] = "hash"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": node_name},
        "status": {"phase": phase},
    }


# The field pairs of events.k8s.io/v1 and core v1 Events (the server converts one to the other).
_EVENT_FIELDS = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedCount", "count"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
)


def _as_core_event(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    if out["apiVersion"] != "v1":
        for new, old in _EVENT_FIELDS:
            if new in out:
                out[old] = out.pop(new)
        out["apiVersion"] = "v1"
    out.setdefault("involvedObject", {})  # required in v1: the server always sends it
    return out


def _as_events_v1(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    if out["apiVersion"] == "v1":
        for new, old in _EVENT_FIELDS:
            if old in out:
                out[new] = out.pop(old)
        out["apiVersion"] = "events.k8s.io/v1"
        # a legacy event has no eventTime: the real server sends null (which the Python
        # client's EventsV1Event refuses to read; read such lists raw)
        out.setdefault("eventTime", None)
    return out


# ---------------------------------------------------------------- the server
_NS = r"/namespaces/(?P<ns>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(f"^{p}$"), h)
    for m, p, h in (
        ("GET", "/version", "_version"),
        ("GET", "/api/v1/nodes", "_list_nodes"),
        ("GET", "/api/v1/nodes/(?P<name>[^/]+)(?:/status)?", "_get_node"),
        ("PATCH", "/api/v1/nodes/(?P<name>[^/]+)", "_patch_node"),
        ("PATCH", "/api/v1/nodes/(?P<name>[^/]+)/status", "_patch_node_status"),
        ("POST", "/api/v1/namespaces", "_create_namespace"),
        ("GET", "/api/v1/namespaces/(?P<name>[^/]+)", "_get_namespace"),
        ("GET", "/api/v1/pods", "_list_pods"),
        ("POST", f"/api/v1{_NS}/pods/(?P<name>[^/]+)/eviction", "_evict"),
        ("GET", "/apis/policy/v1(?:/namespaces/(?P<ns>[^/]+))?/poddisruptionbudgets", "_pdbs"),
        ("GET", f"/apis/coordination.k8s.io/v1{_NS}/leases", "_list_leases"),
        ("POST", f"/apis/coordination.k8s.io/v1{_NS}/leases", "_create_lease"),
        ("GET", f"/apis/coordination.k8s.io/v1{_NS}/leases/(?P<name>[^/]+)", "_get_lease"),
        ("PUT", f"/apis/coordination.k8s.io/v1{_NS}/leases/(?P<name>[^/]+)", "_replace_lease"),
        ("DELETE", f"/apis/coordination.k8s.io/v1{_NS}/leases/(?P<name>[^/]+)", "_delete_lease"),
        ("POST", f"/api/v1{_NS}/events", "_create_event"),
        ("POST", f"/apis/events.k8s.io/v1{_NS}/events", "_create_event"),
        ("GET", f"/api/v1(?:{_NS})?/events", "_list_events"),
        ("GET", f"/apis/events.k8s.io/v1(?:{_NS})?/events", "_list_events"),
    )
]


@dataclass
class _Pdb:
    namespace: str
    name: str
    selector: dict[str, str]
    max_unavailable: int
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))


class FakeApiServer:
    """Start with ``start()``, stop with ``stop()``; the stores and ``requests`` are public."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # what ``inject(until=...)`` compares with
        self.nodes: dict[str, dict[str, Any]] = {}
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> Lease
        self.events: list[dict[str, Any]] = []  # as created, both APIs (see apiVersion)
        self.namespaces: set[str] = set(NAMESPACES)
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        # the fake's own failures: a test fixture fails on any, so a bug here never passes
        # for the API server failing
        self.crashes: list[str] = []
        # name -> hook run just before a PATCH of that node is applied (e.g. a concurrent
        # writer that changes the node between the gate's GET and PATCH)
        self.before_patch: dict[str, Callable[[dict[str, Any]], None]] = {}
        # run just before any request is served (after faults): another writer acting
        # between a client's read and its write
        self.before_request: Callable[[Request], None] | None = None
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> Pod
        self.pdbs: list[_Pdb] = []
        self.pdb_blocked: set[tuple[str, str]] = set()  # evictions answered 429 regardless
        self.terminating_lists = 1
        self._terminating: dict[tuple[str, str], int] = {}  # listings left before it is gone
        self._lock = threading.RLock()  # a before_patch hook may edit a node
        self._rv = 1000
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeApiServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def write_kubeconfig(self, path: Path, *, token: str = TOKEN) -> Path:
        """Context ``fake`` (current) reaches this server; ``nowhere`` a closed port."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "fake", "cluster": {"server": self.url}},
                {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}},
            ],
            "users": [{"name": "gate", "user": {"token": token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "gate"}},
                {"name": "nowhere", "context": {"cluster": "nowhere", "user": "gate"}},
            ],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(doc))
        return path

    # ------------------------------------------------------------ arranging the cluster
    def add(self, doc: dict[str, Any]) -> None:
        self.nodes[doc["metadata"]["name"]] = copy.deepcopy(doc)

    def add_pod(self, doc: dict[str, Any]) -> None:
        meta = doc["metadata"]
        self.pods[(meta["namespace"], meta["name"])] = copy.deepcopy(doc)

    def add_pdb(
        self, namespace: str, selector: dict[str, str], max_unavailable: int, name: str = "pdb"
    ) -> None:
        """A PodDisruptionBudget (policy/v1, matchLabels ``selector``, maxUnavailable)."""
        self.pdbs.append(_Pdb(namespace, name, dict(selector), max_unavailable))

    def add_lease(
        self,
        namespace: str,
        name: str,
        holder: str,
        *,
        renewed: datetime,
        duration_s: int = 3600,
    ) -> None:
        """Another holder's Lease (e.g. medik8s' remediator holding a node)."""
        stamp = renewed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.namespaces.add(namespace)
        self.leases[(namespace, name)] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": self._next_rv(),
            },
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration_s,
                "acquireTime": stamp,
                "renewTime": stamp,
            },
        }

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Another writer (a human, another tool) changes a node: bumps its resourceVersion."""
        with self._lock:
            change(self.nodes[name])
            self.nodes[name]["metadata"]["resourceVersion"] = self._next_rv()

    def touch(self, name: str, **labels: str) -> None:
        """A concurrent writer: change a node's labels."""
        self.edit(name, lambda doc: doc["metadata"]["labels"].update(labels))

    def set_ready(self, name: str, status: str, reason: str = "KubeletNotReady") -> None:
        """The node's Ready condition as the node lifecycle controller would set it
        ("True", "False", or "Unknown" when the kubelet stopped posting)."""

        def change(doc: dict[str, Any]) -> None:
            conditions = doc.setdefault("status", {}).setdefault("conditions", [])
            ready = next((c for c in conditions if c.get("type") == "Ready"), None)
            if ready is None:
                ready = {"type": "Ready"}
                conditions.append(ready)
            ready.update(status=status, reason=reason if status != "True" else "KubeletReady")

        self.edit(name, change)

    # ------------------------------------------------------------ faults
    def inject(
        self,
        status: int | None = 500,
        *,
        times: int | None = None,
        until: float | None = None,
        path: str | None = None,
        method: str | Iterable[str] | None = None,
        delay_s: float = 0.0,
    ) -> Fault:
        """Answer matching requests with ``status`` (None: normally) after ``delay_s``, for
        ``times`` requests and/or until ``clock()`` reaches ``until`` (neither: until
        ``clear_faults``). ``path`` is a regex searched in the path; ``method`` a method or
        several. The first matching fault answers."""
        methods = (method,) if isinstance(method, str) else tuple(method) if method else None
        fault = Fault(
            status,
            tuple(m.upper() for m in methods) if methods else None,
            re.compile(path) if path else None,
            times,
            until,
            delay_s,
        )
        with self._lock:
            self.faults.append(fault)
        return fault

    def conflict_storm(self, times: int, *, path: str | None = None) -> Fault:
        """The next ``times`` writes (POST/PUT/PATCH/DELETE) answer 409 Conflict, as when
        other writers keep changing the objects."""
        return self.inject(409, times=times, path=path, method=WRITES)

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    # ------------------------------------------------------------ queries for tests
    def calls(self, method: str | None = None) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests if method in (None, r.method)]

    def patches(self, name: str | None = None) -> list[Request]:
        """PATCHes of the node itself (not of its status)."""
        return [
            r
            for r in self.requests
            if r.method == "PATCH"
            and (
                r.path == f"/api/v1/nodes/{name}"
                if name
                else r.path.startswith("/api/v1/nodes/") and not r.path.endswith("/status")
            )
        ]

    def status_patches(self, name: str) -> list[Request]:
        """PATCHes of the node's status subresource."""
        return [
            r
            for r in self.requests
            if r.method == "PATCH" and r.path == f"/api/v1/nodes/{name}/status"
        ]

    def evictions(self) -> list[str]:
        """namespace/name of every eviction asked for, in order."""
        out = []
        for r in self.requests:
            if r.method == "POST" and r.path.endswith("/eviction"):
                parts = r.path.split("/")  # /api/v1/namespaces/{ns}/pods/{name}/eviction
                out.append(f"{parts[4]}/{parts[6]}")
        return out

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        conditions = self.nodes[name].get("status", {}).get("conditions", [])
        return next((c for c in conditions if c.get("type") == kind), None)

    # ------------------------------------------------------------ dispatch
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def handle(self, req: Request) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(req)
            fault = self._fault(req)
        if fault is not None and fault.delay_s:
            time.sleep(fault.delay_s)  # outside the lock: other requests go on meanwhile
        with self._lock:
            try:
                if fault is not None and fault.status is not None:
                    if fault.status == 409:
                        raise conflict("this object", req.path.rsplit("/", 1)[-1])
                    raise ApiError(fault.status, f"injected fault on {req.method} {req.path}")
                if req.authorization != f"Bearer {TOKEN}":
                    raise ApiError(401, "Unauthorized")
                if self.before_request is not None:
                    self.before_request(req)
                for method, pattern, handler in _ROUTES:
                    if method == req.method and (m := pattern.match(req.path)):
                        params = {k: v for k, v in m.groupdict().items() if v is not None}
                        return getattr(self, handler)(req, **params)
                if any(p.match(req.path) for _, p, _ in _ROUTES):
                    raise ApiError(405, f"{req.method} is not supported on {req.path}")
                raise ApiError(404, f"the server could not find the requested resource {req.path}")
            except ApiError as exc:
                return exc.code, status_doc(exc.code, exc.reason, str(exc))
            except Exception as exc:  # a bug of the fake: answered 500, kept for the test
                self.crashes.append(f"{req.method} {req.path}: {exc!r}")
                return 500, status_doc(500, "InternalError", f"fake API server bug: {exc!r}")

    def _fault(self, req: Request) -> Fault | None:
        now = self.clock()
        self.faults = [
            f for f in self.faults if (f.until is None or now < f.until) and f.times != 0
        ]
        fault = next((f for f in self.faults if f.matches(req, now)), None)
        if fault is not None and fault.times is not None:
            fault.times -= 1
        return fault

    def _version(self, req: Request) -> tuple[int, dict[str, Any]]:
        return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"}

    def _namespace(self, ns: str) -> None:
        if ns not in self.namespaces:
            raise ApiError(404, f'namespaces "{ns}" not found')

    @staticmethod
    def _body(req: Request, kind: str) -> dict[str, Any]:
        if not isinstance(req.body, dict):
            raise ApiError(400, f"the body must be a {kind} object")
        if req.body.get("kind", kind) != kind:
            raise ApiError(
                400, f'{req.body.get("kind")} in version "v1" cannot be handled as a {kind}'
            )
        return req.body

    def _stamp_new(self, doc: dict[str, Any], ns: str | None) -> dict[str, Any]:
        meta = doc.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(422, "metadata.name: Required value: name or generateName is required")
        if ns is not None:
            if meta.get("namespace", ns) != ns:
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            meta["namespace"] = ns
        meta.update(
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_rv(),
            creationTimestamp=now_rfc3339(),
        )
        return doc

    # ------------------------------------------------------------ nodes
    def _stored_node(self, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            raise ApiError(404, f'nodes "{name}" not found')
        return self.nodes[name]

    def _get_node(self, req: Request, name: str) -> tuple[int, dict[str, Any]]:
        return 200, copy.deepcopy(self._stored_node(name))

    def _list_nodes(self, req: Request) -> tuple[int, dict[str, Any]]:
        if req.query.get("watch", ["false"])[0] in ("true", "1"):
            raise ApiError(400, "this fake API server does not serve watches")
        match = label_matcher(req.query.get("labelSelector", [""])[0])
        fields = field_matcher(req.query.get("fieldSelector", [""])[0], NODE_FIELDS)
        items = [
            copy.deepcopy(doc)
            for doc in self.nodes.values()
            if match(doc["metadata"].get("labels") or {}) and fields(doc)
        ]
        return 200, {
            "apiVersion": "v1",
            "kind": "NodeList",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _patch_node(self, req: Request, name: str) -> tuple[int, dict[str, Any]]:
        return self._apply_node_patch(req, name, status_only=False)

    def _patch_node_status(self, req: Request, name: str) -> tuple[int, dict[str, Any]]:
        return self._apply_node_patch(req, name, status_only=True)

    def _apply_node_patch(
        self, req: Request, name: str, *, status_only: bool
    ) -> tuple[int, dict[str, Any]]:
        kind = (req.content_type or "").split(";")[0].strip()
        if kind not in (STRATEGIC, JSON_MERGE):
            raise ApiError(
                415, f"{req.content_type} is not supported by this fake", "UnsupportedMediaType"
            )
        if not isinstance(req.body, dict):
            raise ApiError(400, "a merge patch is a JSON object")
        dry_run = req.query.get("dryRun", [])
        if dry_run and dry_run != ["All"]:
            raise ApiError(400, f"invalid dryRun {dry_run}")
        stored = self._stored_node(name)
        if hook := self.before_patch.pop(name, None):
            hook(stored)
        want_rv = (req.body.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != stored["metadata"]["resourceVersion"]:
            raise conflict("nodes", name)
        merged = (strategic_merge if kind == STRATEGIC else json_merge)(stored, req.body)
        if status_only:  # the status subresource stores only status
            merged = {**copy.deepcopy(stored), "status": merged.get("status", {})}
        else:  # and the main resource never changes status
            merged["status"] = copy.deepcopy(stored.get("status", {}))
        merged["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        if problem := invalid_labels(merged["metadata"].get("labels") or {}) or invalid_taints(
            (merged.get("spec") or {}).get("taints") or []
        ):
            raise ApiError(422, f'Node "{name}" is invalid: {problem}')
        if "unschedulable" in merged.get("spec", {}) and not merged["spec"]["unschedulable"]:
            del merged["spec"]["unschedulable"]  # omitempty, as the real server stores it
        if merged != stored and not dry_run:
            merged["metadata"]["resourceVersion"] = self._next_rv()
            self.nodes[name] = merged
        return 200, copy.deepcopy(merged)

    # ------------------------------------------------------------ namespaces
    def _create_namespace(self, req: Request) -> tuple[int, dict[str, Any]]:
        doc = self._body(req, "Namespace")
        name = (doc.get("metadata") or {}).get("name")
        if name in self.namespaces:
            raise ApiError(409, f'namespaces "{name}" already exists', "AlreadyExists")
        created = self._stamp_new(copy.deepcopy(doc), None)
        self.namespaces.add(created["metadata"]["name"])
        return 201, {"apiVersion": "v1", "kind": "Namespace", **created}

    def _get_namespace(self, req: Request, name: str) -> tuple[int, dict[str, Any]]:
        self._namespace(name)
        return 200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}

    # ------------------------------------------------------------ leases
    def _lease_spec(self, doc: dict[str, Any]) -> None:
        spec = doc.setdefault("spec", {})
        for key in ("acquireTime", "renewTime"):
            if spec.get(key) is not None:
                spec[key] = microtime(spec[key], f"spec.{key}", "Lease")
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            raise ApiError(
                422,
                f"Lease.coordination.k8s.io is invalid: spec.leaseDurationSeconds: "
                f"Invalid value: {duration}: must be greater than 0",
            )

    def _stored_lease(self, ns: str, name: str) -> dict[str, Any]:
        if (ns, name) not in self.leases:
            raise ApiError(404, f'{LEASES} "{name}" not found')
        return self.leases[(ns, name)]

    def _list_leases(self, req: Request, ns: str) -> tuple[int, dict[str, Any]]:
        items = [copy.deepcopy(d) for (n, _), d in self.leases.items() if n == ns]
        return 200, {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "LeaseList",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    def _create_lease(self, req: Request, ns: str) -> tuple[int, dict[str, Any]]:
        self._namespace(ns)
        doc = copy.deepcopy(self._body(req, "Lease"))
        self._lease_spec(doc)
        name = (doc.get("metadata") or {}).get("name")
        if (ns, name) in self.leases:
            raise ApiError(409, f'{LEASES} "{name}" already exists', "AlreadyExists")
        doc = self._stamp_new(doc, ns)
        doc.update(apiVersion="coordination.k8s.io/v1", kind="Lease")
        self.leases[(ns, doc["metadata"]["name"])] = doc
        return 201, copy.deepcopy(doc)

    def _get_lease(self, req: Request, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        return 200, copy.deepcopy(self._stored_lease(ns, name))

    def _replace_lease(self, req: Request, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        doc = copy.deepcopy(self._body(req, "Lease"))
        meta = doc.setdefault("metadata", {})
        if meta.get("name") != name:
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on "
                f"the URL ({name})",
            )
        stored = self._stored_lease(ns, name)
        if meta.get("resourceVersion") not in (None, "", stored["metadata"]["resourceVersion"]):
            raise conflict(LEASES, name)
        self._lease_spec(doc)
        # what the client may not change: identity and bookkeeping stay the server's
        meta.update(
            {
                k: stored["metadata"][k]
                for k in ("uid", "creationTimestamp", "resourceVersion")
                if k in stored["metadata"]
            },
            namespace=ns,
        )
        doc.update(apiVersion="coordination.k8s.io/v1", kind="Lease")
        if doc != stored:
            meta["resourceVersion"] = self._next_rv()
            self.leases[(ns, name)] = doc
        return 200, copy.deepcopy(doc)

    def _delete_lease(self, req: Request, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        stored = self._stored_lease(ns, name)
        options = req.body if isinstance(req.body, dict) else {}  # DeleteOptions
        pre = options.get("preconditions") or {}
        if pre.get("resourceVersion") not in (None, stored["metadata"]["resourceVersion"]):
            raise conflict(LEASES, name)
        if pre.get("uid") not in (None, stored["metadata"]["uid"]):
            raise ApiError(
                409,
                f"Precondition failed: UID in precondition: {pre['uid']}, "
                f"UID in object meta: {stored['metadata']['uid']}",
            )
        del self.leases[(ns, name)]
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": "coordination.k8s.io",
                "kind": "leases",
                "uid": stored["metadata"]["uid"],
            },
        }

    # ------------------------------------------------------------ events
    def _create_event(self, req: Request, ns: str) -> tuple[int, dict[str, Any]]:
        self._namespace(ns)
        doc = copy.deepcopy(self._body(req, "Event"))
        if req.path.startswith("/apis/events.k8s.io/"):
            doc["apiVersion"] = "events.k8s.io/v1"
            if not doc.get("eventTime"):
                raise ApiError(422, "Event.events.k8s.io is invalid: eventTime: Required value")
            doc["eventTime"] = microtime(doc["eventTime"], "eventTime", "Event")
            for key in ("reportingController", "reportingInstance", "action", "reason"):
                if not doc.get(key):
                    raise ApiError(422, f"Event.events.k8s.io is invalid: {key}: Required value")
        else:
            doc["apiVersion"] = "v1"
        doc["kind"] = "Event"
        name = (doc.get("metadata") or {}).get("name")
        if any(
            e["metadata"]["namespace"] == ns and e["metadata"]["name"] == name for e in self.events
        ):
            raise ApiError(409, f'events "{name}" already exists', "AlreadyExists")
        self.events.append(self._stamp_new(doc, ns))
        return 201, copy.deepcopy(doc)

    def _list_events(self, req: Request, ns: str | None = None) -> tuple[int, dict[str, Any]]:
        # one store behind both APIs, as on the real server: each lists every event
        # in its own shape
        events_v1 = req.path.startswith("/apis/")
        selector = req.query.get("fieldSelector", [""])[0]
        if events_v1 and selector:
            raise ApiError(400, "this fake serves fieldSelector on /api/v1 events only")
        fields = field_matcher(selector, EVENT_FIELDS)
        shape = _as_events_v1 if events_v1 else _as_core_event
        items = [
            shape(e)
            for e in self.events
            if ns in (None, e["metadata"]["namespace"]) and fields(_as_core_event(e))
        ]
        return 200, {
            "apiVersion": "events.k8s.io/v1" if events_v1 else "v1",
            "kind": "EventList",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    # ------------------------------------------------------------ pods and evictions
    def _list_pods(self, req: Request) -> tuple[int, dict[str, Any]]:
        fields = field_matcher(req.query.get("fieldSelector", [""])[0], POD_FIELDS)
        items = []
        for pkey, doc in list(self.pods.items()):
            if not fields(doc):
                continue
            items.append(copy.deepcopy(doc))
            if pkey in self._terminating:
                self._terminating[pkey] -= 1
                if self._terminating[pkey] < 0:  # gone after its last listing
                    del self._terminating[pkey], self.pods[pkey]
                    items.pop()
        return 200, {"apiVersion": "v1", "kind": "PodList", "items": items}

    def _pdbs(self, req: Request, ns: str | None = None) -> tuple[int, dict[str, Any]]:
        items = [
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": b.name, "namespace": b.namespace, "uid": b.uid},
                "spec": {
                    "selector": {"matchLabels": b.selector},
                    "maxUnavailable": b.max_unavailable,
                },
                "status": {"disruptionsAllowed": self._disruptions_allowed(b)},
            }
            for b in self.pdbs
            if ns in (None, b.namespace)
        ]
        return 200, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList", "items": items}

    def _covered(self, budget: _Pdb) -> list[dict[str, Any]]:
        return [
            p
            for (ns, _), p in self.pods.items()
            if ns == budget.namespace
            and all(p["metadata"].get("labels", {}).get(k) == v for k, v in budget.selector.items())
        ]

    def _disruptions_allowed(self, budget: _Pdb) -> int:
        # the controller's arithmetic with maxUnavailable: expected pods (here: every covered
        # pod, terminating ones too: their controller still wants them) minus the budget
        # must stay healthy (Running and not terminating)
        covered = self._covered(budget)
        healthy = sum(
            1
            for p in covered
            if p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
        )
        return max(0, healthy - (len(covered) - budget.max_unavailable))

    def _evict(self, req: Request, ns: str, name: str) -> tuple[int, dict[str, Any]]:
        key = (ns, name)
        body = req.body if isinstance(req.body, dict) else {}
        if body.get("kind") != "Eviction" or (body.get("metadata") or {}).get("name") != name:
            raise ApiError(400, "the body must be an Eviction of this pod")
        if key not in self.pods:
            raise ApiError(404, f'pods "{name}" not found')
        target = self.pods[key]
        budgets = [b for b in self.pdbs if target in self._covered(b)]
        if len(budgets) > 1:
            raise ApiError(
                500,
                "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support.",
            )
        # a pod that is not running or already terminating disrupts nothing: no budget applies
        counts = target["status"].get("phase") == "Running" and (
            "deletionTimestamp" not in target["metadata"]
        )
        if key in self.pdb_blocked or (
            counts and budgets and self._disruptions_allowed(budgets[0]) <= 0
        ):
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        if key not in self._terminating:
            target["metadata"]["deletionTimestamp"] = now_rfc3339()
            self._terminating[key] = self.terminating_lists
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    # ------------------------------------------------------------ HTTP
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                req = Request(
                    method=self.command,
                    path=url.path,
                    query=parse_qs(url.query),
                    content_type=self.headers.get("Content-Type"),
                    body=body,
                    authorization=self.headers.get("Authorization"),
                )
                code, doc = server.handle(req)
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_PUT = do_POST = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        return Handler
