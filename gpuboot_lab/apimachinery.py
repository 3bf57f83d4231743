"""What the Kubernetes API server's machinery does to a request, for the fake API server
(gpuboot_lab.kubeapi): errors as Status objects, JSON and strategic merge patches, label
selectors, label validation and MicroTime parsing, each as the real server does it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Strategic merge keys of the Node lists that have one (k8s.io/api core/v1 types.go
# patchMergeKey); every other list is replaced whole.
MERGE_KEYS = {("status", "conditions"): "type", ("status", "addresses"): "type"}
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
# metav1.RFC3339Micro as Go's time.Parse applies it: exactly six fractional digits
_MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(?:Z|[+-]\d\d:\d\d)$")
_SELECTOR_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\((.*)\)\s*$")


class ApiError(Exception):
    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code, self.reason = code, reason or _REASONS.get(code, "Unknown")


def status_doc(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def json_merge(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge, ``null`` deletes a key, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = json_merge(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """A strategic merge patch as the API server applies it to a Node: a JSON merge patch,
    but the lists of MERGE_KEYS merge element by element on their key."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$retainKeys")):
            continue  # order and retention hints: no effect on what is stored here
        if key.startswith("$"):
            raise ApiError(400, f"unknown patch directive {key!r} at {'.'.join(path) or '.'}")
        here = (*path, key)
        if value is None:
            out.pop(key, None)
        elif here in MERGE_KEYS and isinstance(value, list):
            out[key] = _merge_list(out.get(key) or [], value, MERGE_KEYS[here], here)
        else:
            out[key] = strategic_merge(out.get(key), value, here)
    return out


def _merge_list(stored: list[Any], patch: list[Any], key: str, path: tuple[str, ...]) -> list:
    out = copy.deepcopy(stored)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError(400, f"{'.'.join(path)}: every element needs its merge key {key!r}")
        at = next((i for i, old in enumerate(out) if old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = strategic_merge(out[at], item, path)
    return out


def split_selector(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [p.strip() for p in [*parts, current] if p.strip()]


def label_matcher(selector: str) -> Callable[[dict[str, str]], bool]:
    """A Kubernetes label selector (=, ==, !=, in, notin, exists, !exists), ANDed."""
    tests: list[Callable[[dict[str, str]], bool]] = []
    for term in split_selector(selector):
        if m := _SELECTOR_SET.match(term):
            key, op = m.group(1), m.group(2)
            values = {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                tests.append(lambda ls, k=key, vs=values: ls.get(k) in vs)
            else:
                tests.append(lambda ls, k=key, vs=values: ls.get(k) not in vs)
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            tests.append(lambda ls, k=key, v=value: ls.get(k) != v)
        elif "=" in term:
            key, value = (s.strip() for s in re.split(r"==?", term, maxsplit=1))
            tests.append(lambda ls, k=key, v=value: ls.get(k) == v)
        elif term.startswith("!"):
            absent = term[1:].strip()
            tests.append(lambda ls, k=absent: k not in ls)
        elif re.match(r"^[A-Za-z0-9_./-]+$", term):
            tests.append(lambda ls, k=term: k in ls)
        else:
            raise ApiError(400, f"unable to parse requirement: {term!r}")
    return lambda labels: all(t(labels) for t in tests)


def microtime(value: Any, field_path: str, kind: str) -> str:
    """The MicroTime as the server stores it (UTC, six digits); 400 as the real decoder
    answers anything else (metav1.MicroTime parses RFC3339Micro with Go's time.Parse)."""
    if not isinstance(value, str) or not _MICROTIME.match(value):
        raise ApiError(
            400,
            f'{kind} in version "v1" cannot be handled as a {kind}: {field_path}: parsing time '
            f'{json.dumps(value)} as "2006-01-02T15:04:05.000000Z07:00": cannot parse',
        )
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def invalid_labels(labels: dict[str, Any]) -> str | None:
    for key, value in labels.items():
        prefix, _, name = key.rpartition("/")
        if not _LABEL_NAME.match(name) or (prefix and len(prefix) > 253):
            return f"metadata.labels: Invalid value: {key!r}: invalid label key"
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            return f"metadata.labels: Invalid value: {value!r}: invalid label value"
    return None


def invalid_taints(taints: list[Any]) -> str | None:
    """What the real server's Node validation refuses in spec.taints (422)."""
    seen = set()
    for i, taint in enumerate(taints):
        key, effect = (taint or {}).get("key"), (taint or {}).get("effect")
        if not isinstance(key, str) or not _LABEL_NAME.match(key.rpartition("/")[2]):
            return f"spec.taints[{i}].key: Invalid value: {key!r}"
        if effect not in TAINT_EFFECTS:
            return f"spec.taints[{i}].effect: Unsupported value: {effect!r}"
        if (key, effect) in seen:
            return (
                f"spec.taints[{i}]: Duplicate value: taints must be unique by key and effect pair"
            )
        seen.add((key, effect))
    return None


def conflict(resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
    )


def field_text(doc: dict[str, Any], dotted: str) -> str:
    """A field as a fieldSelector compares it (an absent bool is "false")."""
    value: Any = doc
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool) or (value is None and dotted == "spec.unschedulable"):
        return "true" if value else "false"
    return "" if value is None else str(value)


def field_matcher(selector: str, supported: tuple[str, ...]) -> Callable[[dict[str, Any]], bool]:
    """A fieldSelector (=, ==, !=, ANDed) over the fields the resource supports; any other
    field is a 400, as the real server answers."""
    tests: list[Callable[[dict[str, Any]], bool]] = []
    for term in split_selector(selector):
        parts = re.split(r"(!=|==|=)", term, maxsplit=1)
        if len(parts) != 3:
            raise ApiError(400, f"invalid field selector: {term!r}")
        key, op, value = (part.strip() for part in parts)
        if key not in supported:
            raise ApiError(400, f'field label not supported: "{key}"')
        tests.append(lambda doc, k=key, v=value, n=op == "!=": (field_text(doc, k) == v) != n)
    return lambda doc: all(t(doc) for t in tests)
