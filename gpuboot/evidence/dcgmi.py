"""``dcgmi diag -r N``: the boxed table text and the ``-j`` JSON document.

Results are kept as printed ("Pass", "Fail", "Skip", "Warn", plus a scope such as "All" or
"GPU: 0, 1") with their category; ``failed``/``warned`` list tests by name. DCGM 3.x JSON
has a "DCGM GPU Diagnostic" root, DCGM 4.x "DCGM Diagnostic": both are accepted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "dcgmi diag"

_CATEGORY = re.compile(r"^[|+]-+\s*(\w[\w ]*?)\s*-+[+|]")
_ROW = re.compile(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|$")


@dataclass(frozen=True)
class DiagResult:
    category: str  # "Deployment", "Hardware", "Stress", ...
    test: str
    result: str  # "Pass", "Fail", "Skip", "Warn", ...
    scope: str | None = None  # "All", "GPU: 0, 1"
    gpu_id: str | None = None  # per-entity rows of the JSON form
    detail: str | None = None  # warning / info text


@dataclass(frozen=True)
class DcgmDiag:
    results: tuple[DiagResult, ...]
    metadata: dict[str, str]  # "DCGM Version", "Driver Version Detected", ...

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.test for r in self.results if r.result.lower() == "fail"))

    @property
    def warned(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.test for r in self.results if r.result.lower() == "warn"))

    def result(self, test: str) -> str | None:
        return next((r.result for r in self.results if r.test == test), None)


def parse_dcgmi_diag_text(text: str) -> DcgmDiag:
    require_text(TOOL, text)
    if text.lstrip().startswith("{"):
        return parse_dcgmi_diag_json(text)
    category = None
    results: list[DiagResult] = []
    meta: dict[str, str] = {}
    last: DiagResult | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _CATEGORY.match(line):
            category = m.group(1)
            continue
        m = _ROW.match(line)
        if not m or category is None:
            continue
        name, value = m.group(1), m.group(2)
        if category == "Metadata":
            meta[name] = value
            continue
        if not name and last is not None:  # wrapped warning text continues the row above
            results[-1] = last = DiagResult(
                last.category,
                last.test,
                last.result,
                last.scope,
                None,
                ((last.detail or "") + " " + value).strip(),
            )
            continue
        head, _, scope = value.partition(" - ")
        last = DiagResult(category, name, head.strip(), scope.strip() or None)
        results.append(last)
    if not results:
        raise ParseError(TOOL, "no diagnostic result rows found", hint="is this dcgmi diag output?")
    return DcgmDiag(results=tuple(results), metadata=meta)


def parse_dcgmi_diag_json(text: str) -> DcgmDiag:
    require_text(TOOL, text)
    start = text.find("{")
    try:
        doc = json.loads(text[start:] if start >= 0 else text)
    except ValueError as exc:
        raise ParseError(TOOL, f"not JSON: {exc}") from exc
    body = (
        doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic")
        if isinstance(doc, dict)
        else None
    )
    if not isinstance(body, dict) or "test_categories" not in body:
        raise ParseError(TOOL, "JSON has no 'DCGM ... Diagnostic' / test_categories")
    results: list[DiagResult] = []
    for cat in body["test_categories"]:
        for test in cat.get("tests", []):
            for res in test.get("results", []) or [{}]:
                warnings = res.get("warnings") or []
                detail = (
                    "; ".join(
                        w.get("warning", str(w)) if isinstance(w, dict) else str(w)
                        for w in warnings
                    )
                    or res.get("info")
                    or None
                )
                if isinstance(detail, list):
                    detail = "; ".join(map(str, detail))
                gpu = res.get("gpu_id", res.get("entity_id"))
                results.append(
                    DiagResult(
                        cat.get("category", "?"),
                        test.get("name", "?"),
                        res.get("status", "unknown"),
                        None,
                        None if gpu is None else str(gpu),
                        detail,
                    )
                )
    if not results:
        raise ParseError(TOOL, "JSON lists no test results")
    meta = {
        k: str(v)
        for k, v in body.items()
        if k != "test_categories" and not isinstance(v, list | dict)
    }
    return DcgmDiag(results=tuple(results), metadata=meta)
