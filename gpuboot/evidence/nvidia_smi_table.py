"""The plain ``nvidia-smi`` table (no arguments): the GPUs the driver sees, one block each.

A block's first line holds ``index  name  persistence | bus id  display | ECC``, its second
``fan temp perf power | memory | util compute``. Long names are cut with "..." by the tool.
"ERR!" in a field is nvidia-smi saying it could not read it from that GPU (a GPU in trouble).
Instead of a table nvidia-smi may answer "No devices were found" (the driver sees no GPU) or
"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"; a shell's
"nvidia-smi: command not found" means the tool itself is missing. Those answers are kept in
``answer`` for the rules to judge; text that is none of these is unreadable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import ELISION, require_text, strip_ansi

TOOL = "nvidia-smi"

NO_DEVICES = "No devices were found"
NO_DRIVER = "couldn't communicate with the NVIDIA driver"
NOT_FOUND = "command not found"

_HEADER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_FIRST = re.compile(r"^\s*(\d+)\s+(.+?)\s+(On|Off|ERR!|N/A)\s*$")
_BUS = re.compile(r"^\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\b")


@dataclass(frozen=True)
class TableGpu:
    index: int
    name: str  # as printed: may end in "..." (cut by nvidia-smi)
    persistence: bool | None
    bus_id: str
    errors: tuple[str, ...]  # the fields that read "ERR!" ("fan", "power", ...)


@dataclass(frozen=True)
class SmiTable:
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[TableGpu, ...]
    answer: str | None  # NO_DEVICES / NO_DRIVER / NOT_FOUND: no table, the tool's answer
    elided: bool = False  # an author's "[...]": the GPUs shown are not all the GPUs


_SECOND_FIELDS = ("fan", "temperature", "performance state", "power")


def parse_nvidia_smi_table(text: str) -> SmiTable:
    require_text(TOOL, text)
    text = strip_ansi(text)
    for marker in (NO_DEVICES, NO_DRIVER, NOT_FOUND):
        if marker in text and "Bus-Id" not in text:
            return SmiTable(None, None, (), marker)
    driver = cuda = None
    gpus: list[TableGpu] = []
    pending: dict | None = None  # the block whose first line was read
    elided = False
    for raw in text.splitlines():
        line = raw.strip()
        if ELISION.match(line):
            elided = True
            continue
        if m := _HEADER.search(line):
            driver, cuda = m.group(2), m.group(3)
            continue
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = line[1:-1].split("|")
        if len(cells) != 3:
            continue  # the header and process tables are one cell wide
        first, bus = _FIRST.match(cells[0]), _BUS.match(cells[1])
        if first and bus:
            pending = {
                "index": int(first.group(1)),
                "name": first.group(2).strip(),
                "pm": first.group(3),
                "bus": bus.group(1),
                "err": [
                    f for f, c in (("persistence", cells[0]), ("ECC", cells[2])) if "ERR!" in c
                ],
            }
            continue
        if pending is not None:
            errs = list(pending["err"])
            if "ERR!" in cells[0]:
                words = cells[0].split()
                errs += [
                    f for f, w in zip(_SECOND_FIELDS, words, strict=False) if w.startswith("ERR!")
                ]
            errs += ["memory"] if "ERR!" in cells[1] else []
            errs += ["utilization"] if "ERR!" in cells[2] else []
            pm = {"On": True, "Off": False}.get(pending["pm"])
            gpus.append(
                TableGpu(pending["index"], pending["name"], pm, pending["bus"], tuple(errs))
            )
            pending = None
    if not gpus and driver is None:
        raise ParseError(TOOL, "no nvidia-smi table, no GPU row and no answer of the tool")
    return SmiTable(driver, cuda, tuple(gpus), None, elided)
