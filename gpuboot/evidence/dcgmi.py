"""``dcgmi diag -r N``: the boxed table text and the ``-j`` JSON document, DCGM 2.x to 4.x.

Results are kept as printed ("Pass", "Fail", "Skip", "Warn", "Not Run", plus a scope such as
"All" or "GPU: 0, 1") with their category; ``failed``/``warned`` list tests by name. The
forms differ by version:

- 2.x/3.x table: ``| Targeted Power | Pass - GPUs: 0, 2, 3 |`` then a nameless row
  ``| | Fail - GPU: 1 |`` for the other GPUs, then ``| Warning | GPU 1 ... |`` /
  ``| Info | ... |`` / ``| Error | ... |`` rows (wrapped over nameless rows) for that test.
- 4.x table: ``| pcie | Fail |`` then nameless ``| | GPU0: Pass |`` rows per GPU; its
  Warning rows may come before the per-GPU rows.
- JSON: a "DCGM GPU Diagnostic" (2.x/3.x, ``gpu_id``/``gpu_ids``) or "DCGM Diagnostic"
  (4.x, ``entity_id``, ``test_summary``) root.

``notes`` keeps every Warning/Error/Info text with its test and GPU: the reason a test failed
is what tells a fault of the GPU from one of the harness (``harness_fault``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text
from gpuboot.yamlsafe import loads_json_bounded

TOOL = "dcgmi diag"

_CATEGORY = re.compile(r"^[|+]-+\s*(\w[\w ]*?)\s*-+[+|]")
_ROW = re.compile(r"^\|([^|]*)\|(.*?)\|?$")
_STATUS = r"Pass|Fail|Skip|Warn|Not Run|Skipped|Passed|Failed"
_SCOPED = re.compile(rf"^({_STATUS})\s*-\s*(All|GPUs?:\s*[\d, ]+)\s*$", re.I)  # 2.x/3.x
_PER_GPU = re.compile(rf"^GPU\s*(\d+)\s*:\s*({_STATUS})\s*$", re.I)  # 4.x
_NOTE = re.compile(r"^(Warning|Error|Info)\b\s*:?\s*(?:GPU\s*(\d+))?", re.I)
_GPU_IN_TEXT = re.compile(r"\bGPU\s*(\d+)\b")


@dataclass(frozen=True)
class DiagResult:
    category: str  # "Deployment", "Hardware", "Stress", ...
    test: str
    result: str  # "Pass", "Fail", "Skip", "Warn", ...
    scope: str | None = None  # "All", "GPU: 0, 1"
    gpu_id: str | None = None  # per-GPU rows (4.x table, JSON)
    detail: str | None = None  # warning / info text (JSON results)

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPUs this result names ("GPU: 0, 1", a per-GPU row); () for "All"/none."""
        if self.gpu_id is not None:
            return (self.gpu_id,)
        if self.scope and self.scope.lower().startswith("gpu"):
            return tuple(re.findall(r"\d+", self.scope))
        return ()


@dataclass(frozen=True)
class DiagNote:
    test: str | None  # the test row it follows (None: before any test)
    kind: str  # "warning", "error", "info"
    gpu: str | None
    text: str


@dataclass(frozen=True)
class DcgmDiag:
    results: tuple[DiagResult, ...]
    metadata: dict[str, str]  # "DCGM Version", "Driver Version Detected", ...
    notes: tuple[DiagNote, ...] = ()

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.test for r in self.results if _word(r.result) == "fail"))

    @property
    def warned(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.test for r in self.results if _word(r.result) == "warn"))

    def result(self, test: str) -> str | None:
        return next((r.result for r in self.results if r.test == test), None)

    def reasons(self, test: str) -> tuple[str, ...]:
        """Warning/Error texts (and JSON details) of one test, in order."""
        texts = [n.text for n in self.notes if n.test == test and n.kind != "info"]
        texts += [r.detail for r in self.results if r.test == test and r.detail]
        return tuple(dict.fromkeys(texts))


def _word(result: str) -> str:
    """Normalised status: pass, fail, skip, warn, not run (DCGM's words vary by version)."""
    low = result.strip().lower()
    return {"passed": "pass", "failed": "fail", "skipped": "skip"}.get(low, low)


def status_word(result: str) -> str:
    return _word(result)


# Reasons DCGM gives when a test could not run, or its plugin broke, rather than a GPU
# failing it: the installation or the harness is at fault (DCGM's DCGM_FR_INTERNAL, a
# missing helper or plugin, a CUDA/driver mismatch, a test not supported or not allowed on
# this SKU, the GPU held by another process). A node is never failed on these.
_HARNESS = re.compile(
    r"internal error during the test|child process|couldn't be parsed|could not be parsed"
    r"|cannot load plugin|couldn't load|could not load|failed to load|unable to load"
    r"|plugin dir|no such file or directory|not found|could not exec|is not installed"
    r"|unsupported display driver|cuda ?driver combination|insufficient driver"
    r"|not supported|unsupported gpu|is_allowed|not allowed|skipping test"
    r"|busy or unavailable|permission denied|insufficient permissions"
    r"|timed? ?out waiting|hostengine|host engine",
    re.I,
)


def harness_fault(reason: str) -> str | None:
    """The words of DCGM's reason text saying the test could not run properly (installation,
    plugin, permissions, unsupported), not that the GPU failed what it measured; else None."""
    m = _HARNESS.search(reason)
    return m.group(0) if m else None


def parse_dcgmi_diag_text(text: str) -> DcgmDiag:
    require_text(TOOL, text)
    if text.lstrip().startswith("{"):
        return parse_dcgmi_diag_json(text)
    category = "?"
    results: list[DiagResult] = []
    notes: list[DiagNote] = []
    meta: dict[str, str] = {}
    test: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _CATEGORY.match(line):
            category = m.group(1)
            continue
        m = _ROW.match(line)
        if not m or line.startswith(("+=", "+-")):
            continue
        # the table wraps text at a fixed width, mid-word: keep a continuation's leading
        # space (only the pad column is dropped) so a wrapped text re-joins as written
        name, cell = m.group(1).strip(), m.group(2)[1:].rstrip()
        value = cell.strip()
        if (name, value) == ("Diagnostic", "Result"):
            continue
        if category == "Metadata":
            meta[name] = value
            continue
        note = _NOTE.match(name)
        if note and (name.lower() in ("warning", "error", "info") or note.group(2)):
            kind, gpu = note.group(1).lower(), note.group(2) or _first_gpu(value)
            if kind == "error" and test is None:  # the run stopped before any test (3.x)
                test = f"{category} checks"
                results.append(DiagResult(category, test, "Fail", gpu_id=gpu))
            notes.append(DiagNote(test, kind, gpu, cell))
            continue
        if not name:
            if test is not None and (s := _SCOPED.match(value)):
                results.append(DiagResult(category, test, s.group(1), _scope(s.group(2))))
            elif test is not None and (g := _PER_GPU.match(value)):
                results.append(DiagResult(category, test, g.group(2), gpu_id=g.group(1)))
            elif notes:  # a wrapped Warning/Info text goes on
                last = notes[-1]
                joined = last.text + cell
                notes[-1] = DiagNote(last.test, last.kind, last.gpu or _first_gpu(joined), joined)
            continue
        head, _, scope = value.partition(" - ")
        test = name
        results.append(DiagResult(category, name, head.strip(), _scope(scope) or None))
    if not results:
        raise ParseError(TOOL, "no diagnostic result rows found", hint="is this dcgmi diag output?")
    notes = [DiagNote(n.test, n.kind, n.gpu, re.sub(r"\s+", " ", n.text).strip()) for n in notes]
    return DcgmDiag(results=tuple(results), metadata=meta, notes=tuple(notes))


def _scope(scope: str) -> str:
    return re.sub(r"^GPUs?\s*:\s*", "GPU: ", scope.strip())


def _first_gpu(text: str) -> str | None:
    m = _GPU_IN_TEXT.search(text)
    return m.group(1) if m else None


def parse_dcgmi_diag_json(text: str) -> DcgmDiag:
    require_text(TOOL, text)
    start = text.find("{")
    try:
        doc = loads_json_bounded(text[start:] if start >= 0 else text)
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
    notes: list[DiagNote] = []
    for cat in body["test_categories"]:
        for test in cat.get("tests", []):
            name = test.get("name", "?")
            summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
            for res in test.get("results", []) or [{}]:
                texts = _texts(res.get("warnings")) + _texts(res.get("errors"))
                gpu = res.get("gpu_id", res.get("entity_id"))
                if gpu is None and isinstance(res.get("gpu_ids"), str | int):
                    gpu = res["gpu_ids"]
                gpu = None if gpu is None else str(gpu)
                for t in texts:
                    notes.append(DiagNote(name, "warning", gpu or _first_gpu(t), t))
                info = res.get("info")
                detail = (
                    "; ".join(texts)
                    or ("; ".join(map(str, info)) if isinstance(info, list) else info)
                    or None
                )
                scope = None
                if gpu is not None and "," in gpu:  # "gpu_ids": "0,1,2"
                    scope, gpu = f"GPU: {gpu}", None
                results.append(
                    DiagResult(
                        cat.get("category", "?"),
                        name,
                        str(res.get("status", "unknown")),
                        scope,
                        gpu,
                        detail,
                    )
                )
            for t in _texts(summary.get("warnings")) + _texts(summary.get("errors")):
                notes.append(DiagNote(name, "warning", _first_gpu(t), t))
    if not results:
        raise ParseError(TOOL, "JSON lists no test results")
    meta = {
        k: str(v)
        for k, v in body.items()
        if k != "test_categories" and not isinstance(v, list | dict)
    }
    if isinstance(doc.get("metadata"), dict):  # 4.x keeps versions beside the body
        extra = doc["metadata"].items()
        meta.update({k: str(v) for k, v in extra if not isinstance(v, list | dict)})
    return DcgmDiag(results=tuple(results), metadata=meta, notes=tuple(notes))


def _texts(items) -> list[str]:
    """Warning/error entries: dicts ({"warning"|"message"|"error": text}) or plain texts."""
    out = []
    for w in items or []:
        if isinstance(w, dict):
            t = w.get("warning") or w.get("message") or w.get("error") or w.get("msg")
            out.append(str(t if t is not None else w))
        else:
            out.append(str(w))
    return out
