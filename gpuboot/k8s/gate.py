"""The Kubernetes join gate: after certify, only certified nodes lose the uncertified taint.

Per node: GET the Node, work out the patch (gpuboot.k8s.patch), PATCH it as a strategic
merge patch guarded by the resourceVersion just read. A node's failure (absent, 409
conflict, forbidden, unreachable) is recorded on its action and never stops the others.
The official ``kubernetes`` client is imported lazily: it is an optional extra (``k8s``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuboot.errors import BadInput, ConfigError
from gpuboot.k8s.decision import Target, decide
from gpuboot.k8s.patch import plan
from gpuboot.results import RunReport

FIELD_MANAGER = "gpuboot"
TIMEOUT = (10, 30)  # connect, read (s): a black-holed API server must not hang certify


@dataclass
class GateAction:
    node: str  # the Kubernetes node name
    verdict: str
    changes: list[str] = field(default_factory=list)  # made, or that would be (dry run)
    error: str | None = None
    host: str | None = None  # the inventory host, when it differs from ``node``
    missing: bool = False  # the cluster has no such node
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Api:
    core: Any  # kubernetes.client.CoreV1Api
    api_error: type[Exception]  # the client's ApiException: the server answered, not 2xx
    transport_errors: tuple[type[Exception], ...]  # the server could not be reached


def connect(kubeconfig: str | None, context: str | None) -> Api:
    """The client for that kubeconfig and context, as the operator's kubectl would use."""
    try:
        import urllib3
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
    except ImportError as exc:
        raise BadInput(
            "the Kubernetes gate needs the `kubernetes` Python client",
            hint="pip install 'gpuboot[k8s]'",
        ) from exc
    try:
        api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"cannot load the kubeconfig: {exc}",
            where=kubeconfig or "default kubeconfig",
            hint="pass --kubeconfig FILE (and --k8s-context NAME) as for kubectl",
        ) from exc
    transport = (urllib3.exceptions.HTTPError, OSError)
    return Api(client.CoreV1Api(api_client), ApiException, transport)


def describe(exc: Exception, api: Api) -> str:
    if isinstance(exc, api.api_error):
        status = getattr(exc, "status", None)
        try:
            message = json.loads(getattr(exc, "body", None) or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        if status == 409:
            return "conflict: the node changed while the gate worked on it; run the gate again"
        return f"API error {status} {getattr(exc, 'reason', '')}: {message or exc}".strip()
    return f"cannot reach the API server: {exc}"


def _read(api: Any, name: str) -> dict[str, Any]:
    # raw JSON, not the client's model: the patch must carry every taint exactly as stored
    resp = api.read_node(name, _preload_content=False, _request_timeout=TIMEOUT)
    return json.loads(resp.data)


def apply_target(api: Api, action: GateAction, target: Target, dry_run: bool) -> None:
    """Read the node, patch it towards ``target``; the outcome lands on ``action``
    (shared by the gate and install's drain)."""
    try:
        node = _read(api.core, action.node)
    except api.api_error as exc:
        if getattr(exc, "status", None) == 404:
            action.missing = True
            action.error = "no such node in the cluster"
        else:
            action.error = describe(exc, api)
        return
    except (*api.transport_errors, ValueError) as exc:  # ValueError: not JSON
        action.error = describe(exc, api)
        return
    todo = plan(node, target)
    action.notes = todo.notes
    if todo.body is None:
        return
    if not todo.body["metadata"].get("resourceVersion"):
        action.error = "the API server returned the node without a resourceVersion: not patched"
        return
    try:
        # a dict body goes as application/strategic-merge-patch+json (kubectl's patch type),
        # the client's default in 30 and 37 alike; not every version takes _content_type
        api.core.patch_node(
            action.node,
            todo.body,
            field_manager=FIELD_MANAGER,
            _preload_content=False,
            _request_timeout=TIMEOUT,
            **({"dry_run": "All"} if dry_run else {}),
        )
    except (api.api_error, *api.transport_errors) as exc:
        action.error = describe(exc, api)
        return
    action.changes = todo.changes


def apply_gate(
    report: RunReport,
    *,
    certificates: Mapping[str, str | Path] | None = None,
    kubeconfig: str | None,
    context: str | None = None,
    node_names: dict[str, str] | None = None,
    dry_run: bool = False,
    allow_warn: bool = False,
    now: datetime | None = None,
    allow_partial: bool = False,
) -> list[GateAction]:
    """Gate every node of a certify report; one action per node, in report order.
    ``certificates``: host -> the certificate issued for it (gpuboot.report.write_reports).

    PASS (WARN with ``allow_warn``) with a valid certificate: uncertified taint removed,
    certified/stack/cert labels set, uncordoned if gpuboot had cordoned it. FAIL/ERROR:
    taint kept or added, ``certified=false`` and the failed rule ids, cordoned if it was
    schedulable. ``dry_run`` sends the same PATCHes with ``dryRun=All``: validated by
    the API server (conflicts included), stored by nobody. A partial certificate (its run
    proved less than the SKU requires) lifts no taint unless ``allow_partial``.
    """
    api = connect(kubeconfig, context)
    at = now or datetime.now(UTC)
    names = node_names or {}
    actions = []
    issued = certificates or {}
    for node in report.nodes:
        host = node.host
        target = decide(
            node,
            bundle=report.bundle,
            certificate=issued.get(host),
            allow_warn=allow_warn,
            now=at,
            allow_partial=allow_partial,
        )
        name = names.get(host, host)
        action = GateAction(
            node=name,
            verdict=target.verdict,
            host=host if name != host else None,
            dry_run=dry_run,
        )
        if target.error:
            action.error = target.error
        else:
            apply_target(api, action, target, dry_run)
        actions.append(action)
    return actions
