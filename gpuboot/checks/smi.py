"""Shared readers of nvidia-smi evidence for the rules (failure text, -q, --query-gpu)."""

from __future__ import annotations

import functools
import re

from gpuboot.checks.base import ProbeFailed, probe
from gpuboot.collect import Evidence, ProbeOutput
from gpuboot.errors import ParseError
from gpuboot.evidence.nvidia_smi_csv import CsvGpuRow, parse_query_gpu_csv
from gpuboot.evidence.nvidia_smi_q import NvidiaSmiQ, parse_nvidia_smi_q

QUERY_FILE = "nvidia-smi_--query-gpu_--format=csv.csv"
Q_FILE = "nvidia-smi_-q.txt"
# nvidia-smi prints this instead of a row for a GPU it lost (fallen off the bus, ...).
LOST_GPU = re.compile(r"^Unable to determine the device handle for (?:GPU)?\s*(\S+?):? (.*)$")


def smi_failure(out: ProbeOutput) -> str | None:
    """nvidia-smi's own complaint (no driver, version mismatch) when it could not run."""
    if out.rc == 0:
        return None
    if out.rc == 127:
        return "nvidia-smi is not installed (the driver's userspace is missing)"
    text = (out.stdout + "\n" + out.stderr).strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"nvidia-smi failed (exit {out.rc}): {first}"


def gpu_table(evidence: Evidence) -> tuple[str | None, list[CsvGpuRow], list[tuple[str, str]]]:
    """(failure, rows, lost) from the --query-gpu probe; lost = [(pci, message)]."""
    out = probe(evidence, QUERY_FILE)
    failure = smi_failure(out)
    lost, kept = [], []
    for line in out.stdout.splitlines():
        m = LOST_GPU.match(line.strip())
        if m:
            lost.append((m.group(1), m.group(2)))
        else:
            kept.append(line)
    if failure and not lost:
        return failure, [], []
    if not any(line.strip() for line in kept[1:]):
        return None, [], lost
    return None, list(parse_query_gpu_csv("\n".join(kept)).rows), lost


# Six rules read the same -q output of a node, one after another: parse it once per node
# (the result is frozen; one entry, so nodes never share a parse).
_parse_q = functools.lru_cache(maxsize=1)(parse_nvidia_smi_q)


def smi_q(evidence: Evidence) -> NvidiaSmiQ:
    """The parsed ``nvidia-smi -q``; a run that printed no GPU is a harness ERROR here
    (GPU-001/STK-001 judge the node for a missing driver)."""
    out = probe(evidence, Q_FILE)
    text = "\n".join(ln for ln in out.stdout.splitlines() if not LOST_GPU.match(ln.strip()))
    try:
        parsed = _parse_q(text)
    except ParseError as exc:
        why = smi_failure(out) or str(exc)
        raise ProbeFailed(why, where=Q_FILE) from None
    if not parsed.gpus:
        raise ProbeFailed(smi_failure(out) or "nvidia-smi -q listed no GPU", where=Q_FILE)
    return parsed
