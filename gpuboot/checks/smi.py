"""Shared readers of nvidia-smi evidence for the rules (failure text, -q, --query-gpu), and
the node's own count of its GPUs, against which every per-GPU listing must be complete."""

from __future__ import annotations

import functools
import re

from gpuboot.checks.base import ProbeFailed, probe
from gpuboot.collect import Evidence, ProbeOutput
from gpuboot.errors import GpubootError, ParseError
from gpuboot.evidence.nvidia_smi_csv import CsvGpuRow, parse_query_gpu_csv
from gpuboot.evidence.nvidia_smi_q import NvidiaSmiQ, parse_nvidia_smi_q

QUERY_FILE = "nvidia-smi_--query-gpu_--format=csv.csv"
Q_FILE = "nvidia-smi_-q.txt"
# nvidia-smi prints this instead of a row for a GPU it lost (fallen off the bus, ...).
LOST_TEXT = "Unable to determine the device handle"
LOST_GPU = re.compile(rf"^{LOST_TEXT} for (?:GPU)?\s*(\S+?):? (.*)$")
_ATTACHED = re.compile(r"^Attached GPUs\s*:\s*(\d+)\s*$", re.M)
_HEADER_CHARS = 4096  # the -q header (timestamp, driver, CUDA, Attached GPUs) comes first


def smi_failure(out: ProbeOutput) -> str | None:
    """nvidia-smi's own complaint (no driver, version mismatch) when it could not run."""
    if out.rc == 0:
        return None
    if out.rc == 127:
        return "nvidia-smi is not installed (the driver's userspace is missing)"
    text = (out.stdout + "\n" + out.stderr).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"nvidia-smi failed (exit {out.rc}): {first}"


def incomplete(what: str, where: str) -> ProbeFailed:
    """Evidence that covers less than the node's own inventory: ERROR, never PASS/FAIL."""
    return ProbeFailed(f"evidence incomplete: {what}", where=where)


def gpu_table(
    evidence: Evidence,
) -> tuple[str | None, tuple[CsvGpuRow, ...], tuple[tuple[str, str], ...]]:
    """(failure, rows, lost) from the --query-gpu probe; lost = [(pci, message)]. A table
    with fewer GPUs (rows + lost) than ``nvidia-smi -q`` says are attached is cut short."""
    return _gpu_table(probe(evidence, QUERY_FILE), evidence.get(Q_FILE))


# Eight rules read the same table of a node one after another: parse it once per node (a
# pure function of the two outputs, its result immutable; errors are not cached).
@functools.lru_cache(maxsize=1)
def _gpu_table(out: ProbeOutput, q_out: ProbeOutput | None):
    failure = smi_failure(out)
    lost, kept = [], []
    for line in out.stdout.splitlines():
        m = LOST_GPU.match(line.strip())
        if m:
            lost.append((m.group(1), m.group(2)))
        else:
            kept.append(line)
    if failure and not lost:
        return failure, (), ()
    # nvidia-smi answers "No devices were found" (exit 6) when it sees none: a silent or
    # header-only table is not that answer, it is unreadable
    rows: tuple[CsvGpuRow, ...] = ()
    if any(line.strip() for line in kept[1:]):
        rows = parse_query_gpu_csv("\n".join(kept)).rows
    elif not lost:
        raise ProbeFailed("nvidia-smi --query-gpu listed no GPU and no error", where=QUERY_FILE)
    attached = _attached(q_out)
    if attached is not None and len(rows) + len(lost) < attached:
        raise incomplete(
            f"--query-gpu lists {len(rows) + len(lost)} GPU(s), nvidia-smi -q says "
            f"Attached GPUs: {attached}",
            QUERY_FILE,
        )
    return None, rows, tuple(lost)


def attached_gpus(evidence: Evidence) -> int | None:
    """The ``Attached GPUs`` count in the -q header (NVML's device count), when -q ran."""
    return _attached(evidence.get(Q_FILE))


def _attached(out: ProbeOutput | None) -> int | None:
    if out is None or out.rc not in (0, 15):  # 15: a GPU lost, the others listed
        return None
    m = _ATTACHED.search(out.stdout[:_HEADER_CHARS])
    return int(m.group(1)) if m else None


def gpu_inventory(evidence: Evidence) -> int | None:
    """How many GPUs the node has by its own account: the larger of the --query-gpu table
    (rows and lost GPUs) and the -q header; None when neither can be read (a bundle of
    captures of one tool). A GPU the node lost entirely is in neither: GPU-001 judges that
    against the profile."""
    counts = [attached_gpus(evidence)]
    if QUERY_FILE in evidence:
        try:
            failure, rows, lost = gpu_table(evidence)
            counts.append(None if failure else len(rows) + len(lost))
        except GpubootError:
            pass  # an unreadable table is GPU-001's ERROR; the -q header still counts
    known = [c for c in counts if c is not None]
    return max(known) if known else None


# Six rules read the same -q output of a node, one after another: parse it once per node
# (the result is frozen; one entry, so nodes never share a parse).
_parse_q = functools.lru_cache(maxsize=1)(parse_nvidia_smi_q)


def smi_q(evidence: Evidence) -> NvidiaSmiQ:
    """The parsed ``nvidia-smi -q``; a run that printed no GPU is a harness ERROR here
    (GPU-001/STK-001 judge the node for a missing driver), and so is one that lists fewer
    GPUs than its own header counts, or whose last GPU block stops short of the sections
    the others end with (the output was cut)."""
    out = probe(evidence, Q_FILE)
    text, lost = out.stdout, 0
    if LOST_TEXT in text:  # rare: look at the lines only then (six rules call this per node)
        lines = text.splitlines()
        kept = [ln for ln in lines if not LOST_GPU.match(ln.strip())]
        text, lost = "\n".join(kept), len(lines) - len(kept)
    try:
        parsed = _parse_q(text)
    except ParseError as exc:
        why = smi_failure(out) or str(exc)
        raise ProbeFailed(why, where=Q_FILE) from None
    if not parsed.gpus:
        raise ProbeFailed(smi_failure(out) or "nvidia-smi -q listed no GPU", where=Q_FILE)
    if not parsed.elided:  # an author's excerpt ("[...]") says itself what it left out
        _q_complete(parsed, lost)
    return parsed


def _q_complete(q: NvidiaSmiQ, lost: int) -> None:
    if q.attached_gpus is None:
        raise incomplete("nvidia-smi -q has no 'Attached GPUs' header", Q_FILE)
    if len(q.gpus) + lost < q.attached_gpus:
        raise incomplete(
            f"nvidia-smi -q lists {len(q.gpus) + lost} of its {q.attached_gpus} attached GPUs",
            Q_FILE,
        )
    first, last = _last_section(q.gpus[0].fields), _last_section(q.gpus[-1].fields)
    if first != last:
        raise incomplete(
            f"nvidia-smi -q stops inside GPU {q.gpus[-1].bus_id} (its block ends at "
            f"{last!r}, the first GPU's at {first!r})",
            Q_FILE,
        )


def _last_section(fields: dict[str, str | None]) -> str | None:
    """The top-level section a GPU block ends with (-q prints them in a fixed order)."""
    return next(reversed(fields), "").split("/", 1)[0] or None
