"""A stand-in kube-apiserver for the gate's tests: the Node API subset the gate uses.

Speaks HTTP on 127.0.0.1 (random port, one thread per request) with bearer-token auth:
``GET /version``, ``GET /api/v1/nodes/{name}`` and ``PATCH /api/v1/nodes/{name}`` as
strategic-merge or JSON-merge patch (for the fields the gate touches the two agree: maps
merge, ``null`` deletes a key, lists such as ``spec.taints`` are replaced whole). Like
the real server it honours a ``metadata.resourceVersion`` precondition (409 Conflict),
``dryRun=All`` (validate and answer, store nothing), validates label keys and values
(422), and bumps ``resourceVersion`` on every stored change. Every request is recorded.

For install's drain: ``GET /api/v1/pods?fieldSelector=spec.nodeName=N`` and
``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` (201 accepted, 429 while a
PodDisruptionBudget blocks it, 404 for no such pod). An evicted pod terminates: it is
still listed, with a deletionTimestamp, for ``terminating_lists`` more listings.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

TOKEN = "gpuboot-test-token"
MERGE_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json")
_NODE_PATH = re.compile(r"^/api/v1/nodes/([^/]+)$")
_EVICTION_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$")
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any  # parsed JSON, or None
    authorization: str | None


def node(
    name: str,
    *,
    taints: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    unschedulable: bool = False,
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
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    if unschedulable:
        doc["spec"]["unschedulable"] = True
    return doc


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _invalid_labels(labels: dict[str, Any]) -> str | None:
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if not _LABEL_NAME.match(name) or (prefix and len(prefix) > 253):
            return f"metadata.labels: Invalid value: {key!r}: invalid label key"
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            return f"metadata.labels: Invalid value: {value!r}: invalid label value"
    return None


def pod(
    name: str,
    node_name: str,
    *,
    namespace: str = "default",
    owner: str | None = "ReplicaSet",
    mirror: bool = False,
    phase: str = "Running",
) -> dict[str, Any]:
    """A Pod bound to ``node_name``, owned by a controller of kind ``owner``."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": {}}
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


class FakeApiServer:
    """Start with ``start()``, stop with ``stop()``; ``nodes`` and ``requests`` are public."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.requests: list[Request] = []
        # name -> hook run just before a PATCH of that node is applied (e.g. a concurrent
        # writer that changes the node between the gate's GET and PATCH)
        self.before_patch: dict[str, Callable[[dict[str, Any]], None]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}  # (namespace, name) -> Pod
        self.pdb_blocked: set[tuple[str, str]] = set()  # evictions answered 429
        self.terminating_lists = 1
        self._terminating: dict[tuple[str, str], int] = {}  # listings left before it is gone
        self._lock = threading.Lock()
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

    def add(self, doc: dict[str, Any]) -> None:
        self.nodes[doc["metadata"]["name"]] = copy.deepcopy(doc)

    def add_pod(self, doc: dict[str, Any]) -> None:
        meta = doc["metadata"]
        self.pods[(meta["namespace"], meta["name"])] = copy.deepcopy(doc)

    def evictions(self) -> list[str]:
        """namespace/name of every eviction asked for, in order."""
        out = []
        for r in self.requests:
            if r.method == "POST" and (m := _EVICTION_PATH.match(r.path)):
                out.append(f"{m.group(1)}/{m.group(2)}")
        return out

    def touch(self, name: str, **labels: str) -> None:
        """A concurrent writer: change a node (labels) and bump its resourceVersion."""
        meta = self.nodes[name]["metadata"]
        meta["labels"].update(labels)
        meta["resourceVersion"] = self._next_rv()

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

    # ------------------------------------------------------------ queries for tests
    def calls(self, method: str | None = None) -> list[tuple[str, str]]:
        return [(r.method, r.path) for r in self.requests if method in (None, r.method)]

    def patches(self, name: str | None = None) -> list[Request]:
        return [
            r
            for r in self.requests
            if r.method == "PATCH" and (name is None or r.path == f"/api/v1/nodes/{name}")
        ]

    # ------------------------------------------------------------ API
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def handle(self, req: Request) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(req)
            if req.authorization != f"Bearer {TOKEN}":
                return 401, _status(401, "Unauthorized", "Unauthorized")
            if req.method == "GET" and req.path == "/version":
                return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"}
            if req.method == "GET" and req.path == "/api/v1/pods":
                return 200, self._list_pods(req)
            if req.method == "POST" and (evict := _EVICTION_PATH.match(req.path)):
                return self._evict((evict.group(1), evict.group(2)), req)
            match = _NODE_PATH.match(req.path)
            if not match:
                return 404, _status(404, "NotFound", f"the server could not find {req.path}")
            name = match.group(1)
            stored = self.nodes.get(name)
            if stored is None:
                return 404, _status(404, "NotFound", f'nodes "{name}" not found')
            if req.method == "GET":
                return 200, copy.deepcopy(stored)
            if req.method == "PATCH":
                return self._patch(name, req)
            return 405, _status(405, "MethodNotAllowed", f"{req.method} is not supported")

    def _list_pods(self, req: Request) -> dict[str, Any]:
        selector = req.query.get("fieldSelector", [""])[0]
        field, _, value = selector.partition("=")
        if selector and field != "spec.nodeName":
            raise AssertionError(f"unexpected fieldSelector {selector!r}")
        items = []
        for key, doc in list(self.pods.items()):
            if selector and doc["spec"].get("nodeName") != value:
                continue
            items.append(copy.deepcopy(doc))
            if key in self._terminating:
                self._terminating[key] -= 1
                if self._terminating[key] < 0:  # gone after its last listing
                    del self._terminating[key], self.pods[key]
                    items.pop()
        return {"apiVersion": "v1", "kind": "PodList", "items": items}

    def _evict(self, key: tuple[str, str], req: Request) -> tuple[int, dict[str, Any]]:
        body = req.body if isinstance(req.body, dict) else {}
        if body.get("kind") != "Eviction" or (body.get("metadata") or {}).get("name") != key[1]:
            return 400, _status(400, "BadRequest", "the body must be an Eviction of this pod")
        if key not in self.pods:
            return 404, _status(404, "NotFound", f'pods "{key[1]}" not found')
        if key in self.pdb_blocked:
            return 429, _status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
        if key not in self._terminating:
            self.pods[key]["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
            self._terminating[key] = self.terminating_lists
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    def _patch(self, name: str, req: Request) -> tuple[int, dict[str, Any]]:
        if (req.content_type or "").split(";")[0].strip() not in MERGE_TYPES:
            return 415, _status(415, "UnsupportedMediaType", f"{req.content_type} unsupported")
        if not isinstance(req.body, dict):
            return 400, _status(400, "BadRequest", "a merge patch is a JSON object")
        dry_run = req.query.get("dryRun", [])
        if dry_run and dry_run != ["All"]:
            return 400, _status(400, "BadRequest", f"invalid dryRun {dry_run}")
        if hook := self.before_patch.pop(name, None):
            hook(self.nodes[name])
        stored = self.nodes[name]
        want_rv = (req.body.get("metadata") or {}).get("resourceVersion")
        if want_rv is not None and want_rv != stored["metadata"]["resourceVersion"]:
            return 409, _status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        merged = _merge(stored, req.body)
        if problem := _invalid_labels(merged["metadata"].get("labels") or {}):
            return 422, _status(422, "Invalid", f'Node "{name}" is invalid: {problem}')
        if "unschedulable" in merged["spec"] and not merged["spec"]["unschedulable"]:
            del merged["spec"]["unschedulable"]  # omitempty, as the real server stores it
        if merged != stored:
            merged["metadata"]["resourceVersion"] = (
                stored["metadata"]["resourceVersion"] if dry_run else self._next_rv()
            )
        if not dry_run:
            self.nodes[name] = merged
        return 200, copy.deepcopy(merged)

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
