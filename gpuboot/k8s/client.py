"""The Kubernetes API client gpuboot acts through: connect with the operator's kubeconfig,
read nodes as raw JSON, put an API error in words.

The official ``kubernetes`` client is imported lazily: it is an optional extra (``k8s``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpuboot.errors import BadInput, ConfigError

TIMEOUT = (10, 30)  # connect, read (s): a black-holed API server must not hang certify


@dataclass(frozen=True)
class Api:
    core: Any  # kubernetes.client.CoreV1Api
    api_error: type[Exception]  # the client's ApiException: the server answered, not 2xx
    transport_errors: tuple[type[Exception], ...]  # the server could not be reached
    coordination: Any = None  # kubernetes.client.CoordinationV1Api (the node's Lease)


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
    return Api(
        client.CoreV1Api(api_client),
        ApiException,
        transport,
        client.CoordinationV1Api(api_client),
    )


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


def server_failed(exc: Exception, api: Api) -> bool:
    """The API server itself failed (5xx, unreachable), not this one request (404, 409,
    403): what is read from it now may be stale, so no further action is taken."""
    if isinstance(exc, api.api_error):
        return (getattr(exc, "status", None) or 500) >= 500
    return True


def read_node(api: Api, name: str) -> dict[str, Any]:
    # raw JSON, not the client's model: a patch must carry every taint exactly as stored
    resp = api.core.read_node(name, _preload_content=False, _request_timeout=TIMEOUT)
    return json.loads(resp.data)


def list_nodes(api: Api) -> list[dict[str, Any]]:
    """Every Node, as raw JSON, in one LIST: the disruption gate counts from one snapshot."""
    resp = api.core.list_node(_preload_content=False, _request_timeout=TIMEOUT)
    items = json.loads(resp.data).get("items")
    if not isinstance(items, list):
        raise ValueError("the node list has no items")
    return items
