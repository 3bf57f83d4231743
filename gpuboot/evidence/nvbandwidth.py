"""nvbandwidth results, JSON (``-j``) and the plain-text matrix format.

Each testcase keeps its status ("Passed", "Waived", ...) and its bandwidth matrix in GB/s
(latency tests are in ns: see ``unit``). Waived tests (e.g. device-to-device on a single
GPU) are facts, not errors; a matrix cell "N/A" is None. A testcase nvbandwidth stopped on its
own check ("ASSERT in expression ...", "[CUDA_ERROR_...] ... in expression ...") has status
"Error" and the line in ``error``: no measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text
from gpuboot.yamlsafe import loads_json_bounded

TOOL = "nvbandwidth"
# its error_handling.h: ASSERT(x) and CU_ASSERT/CUDA_ASSERT print "... in expression <x> in ..."
_ASSERT = re.compile(r"^(?:ASSERT in expression|\[CUDA_ERROR_\w+\])")


@dataclass(frozen=True)
class NvbwTest:
    name: str
    status: str  # "Passed", "Waived", "Error", ...
    description: str | None
    unit: str | None  # "GB/s" or "ns", from the description
    matrix: tuple[tuple[float | None, ...], ...]
    sum: float | None
    average: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    error: str | None = None  # nvbandwidth's own assertion that stopped the testcase

    @property
    def passed(self) -> bool:
        return self.status.lower() == "passed"


@dataclass(frozen=True)
class Nvbandwidth:
    version: str | None
    driver_version: str | None
    cuda_runtime_version: int | None
    tests: tuple[NvbwTest, ...]

    def test(self, name: str) -> NvbwTest:
        return next(t for t in self.tests if t.name == name)


def _cell(v: object) -> float | None:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _unit(desc: str | None) -> str | None:
    m = re.search(r"\((GB/s|ns|us)\)", desc or "")
    return m.group(1) if m else None


def _stopped_testcase(cases: list, error: object) -> int | None:
    if not error:
        return None
    running = [i for i, c in enumerate(cases) if str(c.get("status", "")).lower() == "running"]
    return running[-1] if running else None


def parse_nvbandwidth_json(text: str) -> Nvbandwidth:
    require_text(TOOL, text)
    start = text.find("{")  # nvbandwidth may print warnings before the JSON document
    try:
        doc = loads_json_bounded(text[start:] if start >= 0 else text)
        body = doc["nvbandwidth"]
        cases = body["testcases"]
        if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
            raise TypeError("testcases is not a list of objects")
    except (ValueError, KeyError, TypeError) as exc:
        raise ParseError(TOOL, f"not nvbandwidth JSON: {exc}") from exc
    tests = []
    # nvbandwidth records the assertion that stopped a testcase under the document's "error"
    # (its json_output.cpp looks for the testcases one level too high), leaving that testcase
    # "Running": the error belongs to the last testcase still running.
    stopped = _stopped_testcase(cases, body.get("error"))
    for i, c in enumerate(cases):
        desc = (c.get("bandwidth_description") or "").strip() or None
        error = c.get("error") or (body.get("error") if i == stopped else None)
        tests.append(
            NvbwTest(
                name=c.get("name", "?"),
                status="Error" if error else c.get("status", "unknown"),
                error=str(error).strip() if error else None,
                description=desc,
                unit=_unit(desc),
                matrix=tuple(tuple(_cell(v) for v in row) for row in c.get("bandwidth_matrix", [])),
                sum=_cell(c.get("sum")),
                average=_cell(c.get("average")),
                minimum=_cell(c.get("min")),
                maximum=_cell(c.get("max")),
            )
        )
    return Nvbandwidth(
        version=body.get("version"),
        driver_version=body.get("Driver Version"),
        cuda_runtime_version=body.get("CUDA Runtime Version"),
        tests=tuple(tests),
    )


_RUN = re.compile(r"^Running\s+(\S+?)\.?\s*$")
_SUM = re.compile(r"^SUM\s+(\S+)\s+([\d.]+)\s*$")


def parse_nvbandwidth_text(text: str) -> Nvbandwidth:
    require_text(TOOL, text)
    if text.lstrip().startswith("{"):
        return parse_nvbandwidth_json(text)
    version = driver = None
    cuda = None
    tests: list[NvbwTest] = []
    cur: dict | None = None

    def close() -> None:
        if cur is not None:
            status = cur["status"] or ("Passed" if cur["matrix"] else "unknown")
            tests.append(
                NvbwTest(
                    cur["name"],
                    status,
                    cur["desc"],
                    _unit(cur["desc"]),
                    tuple(cur["matrix"]),
                    cur["sum"],
                    error=cur["error"],
                )
            )

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("nvbandwidth Version:"):
            version = line.split(":", 1)[1].strip()
        elif line.startswith("Driver Version:"):
            driver = line.split(":", 1)[1].strip()
        elif line.startswith("CUDA Runtime Version:"):
            cuda = int(line.split(":", 1)[1].strip())
        elif m := _RUN.match(line):
            close()
            cur = {
                "name": m.group(1),
                "desc": None,
                "matrix": [],
                "sum": None,
                "status": None,
                "error": None,
            }
        elif cur is None:
            continue
        elif _ASSERT.search(line):
            cur["status"], cur["error"] = "Error", cur["error"] or line
        elif m := _SUM.match(line):
            cur["sum"] = float(m.group(2))
        elif "waived" in line.lower():
            cur["status"] = "Waived"
        elif re.search(r"\((GB/s|ns|us)\)", line) and cur["desc"] is None:
            cur["desc"] = line
        elif re.match(r"^\d+(\s+\d+)*$", line):
            continue  # column header of the matrix
        elif re.match(r"^\d+\s+", line):
            cur["matrix"].append(tuple(_cell(v) for v in line.split()[1:]))
    close()
    if not tests:
        raise ParseError(
            TOOL, "no 'Running <test>' section found", hint="is this nvbandwidth output?"
        )
    return Nvbandwidth(
        version=version, driver_version=driver, cuda_runtime_version=cuda, tests=tuple(tests)
    )
