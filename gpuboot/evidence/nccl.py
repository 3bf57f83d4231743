"""nccl-tests ``all_reduce_perf`` output (also fits the other ``*_perf`` binaries).

Two table layouts exist: the current one (``root`` column, ``#wrong`` counts) and the old
one (no ``root``, an ``error`` column holding the max numeric error or N/A). Columns are
located from the header, so either parses. Bandwidths are GB/s (gigabytes/s) as printed;
times are microseconds. A run that aborted with an NCCL/CUDA failure is returned with
``failures`` set and possibly no rows: the caller must treat it as a failed run, not zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "all_reduce_perf"

_RANK_NEW = re.compile(
    r"^#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_RANK_OLD = re.compile(
    r"^#\s*Rank\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_HDR_KV = re.compile(r"(\w[\w ]*?):?\s+(\S+)")
_FAIL = re.compile(
    r"(Test (?:NCCL|CUDA) failure|NCCL failure|Test failure|NCCL WARN|"
    r"\bAbort(?:ing|ed)\b|out of memory|Segmentation fault)",
    re.I,
)


@dataclass(frozen=True)
class NcclPoint:
    time_us: float
    algbw_gbytes_s: float
    busbw_gbytes_s: float
    wrong: int | None  # new layout: count of wrong elements; None when N/A (validation off)
    max_error: float | None  # old layout: max numeric error; None when N/A


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: NcclPoint
    in_place: NcclPoint

    @property
    def busbw_gbytes_s(self) -> float:
        return max(self.out_of_place.busbw_gbytes_s, self.in_place.busbw_gbytes_s)


@dataclass(frozen=True)
class NcclRank:
    rank: int
    pid: int
    host: str
    device: int
    bus: str
    name: str


@dataclass(frozen=True)
class NcclResult:
    layout: str  # "new" (root + #wrong) or "old" (error column)
    rows: tuple[NcclRow, ...]
    ranks: tuple[NcclRank, ...]
    avg_busbw_gbytes_s: float | None
    out_of_bounds: int | None
    out_of_bounds_ok: bool | None
    nccl_version: str | None
    params: dict[str, str]  # nThread, nGpus, minBytes, maxBytes, iters, validation...
    failures: tuple[str, ...] = ()

    @property
    def completed(self) -> bool:
        return bool(self.rows) and self.avg_busbw_gbytes_s is not None and not self.failures

    @property
    def peak_busbw_gbytes_s(self) -> float | None:
        return max((r.busbw_gbytes_s for r in self.rows), default=None)

    @property
    def wrong_total(self) -> int:
        return sum((p.wrong or 0) for r in self.rows for p in (r.out_of_place, r.in_place))

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.host for r in self.ranks))

    def row_for(self, size_bytes: int) -> NcclRow | None:
        return next((r for r in reversed(self.rows) if r.size_bytes == size_bytes), None)


def _num(tok: str) -> float | None:
    return None if tok.upper() == "N/A" else float(tok)


def _point(toks: list[str], old: bool) -> NcclPoint:
    time_us, algbw, busbw, last = toks
    bad = last.upper() == "N/A"
    return NcclPoint(
        float(time_us),
        float(algbw),
        float(busbw),
        wrong=None if old or bad else int(float(last)),
        max_error=None if not old or bad else float(last),
    )


def parse_all_reduce_perf(text: str) -> NcclResult:
    require_text(TOOL, text)
    layout: str | None = None
    has_root = False
    rows: list[NcclRow] = []
    ranks: list[NcclRank] = []
    params: dict[str, str] = {}
    failures: list[str] = []
    avg = oob = None
    oob_ok = version = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            if body.startswith("nThread"):
                # "nThread 1 nGpus 8 ... warmup iters: 5 iters: 20 validation: 1"
                params = dict(re.findall(r"([A-Za-z][A-Za-z ]*?)\s*:?\s+(-?\d\S*)", body))
            elif m := _RANK_NEW.match(line):
                ranks.append(
                    NcclRank(
                        int(m.group(1)),
                        int(m.group(3)),
                        m.group(4),
                        int(m.group(5)),
                        m.group(6),
                        m.group(7).strip(),
                    )
                )
            elif m := _RANK_OLD.match(line):
                ranks.append(
                    NcclRank(
                        int(m.group(1)),
                        int(m.group(2)),
                        m.group(3),
                        int(m.group(4)),
                        m.group(5),
                        m.group(6).strip(),
                    )
                )
            elif re.match(r"size\s+count\s+type", body):
                cols = body.split()
                has_root = "root" in cols
                layout = "old" if "error" in cols else "new"
            elif body.startswith("Avg bus bandwidth"):
                avg = float(body.split(":", 1)[1].split()[0])
            elif body.startswith("Out of bounds values"):
                tail = body.split(":", 1)[1].split()
                oob = int(tail[0])
                oob_ok = (tail[1].upper() == "OK") if len(tail) > 1 else None
            continue
        if line.startswith("NCCL version"):
            version = line.split()[2] if len(line.split()) > 2 else None
            continue
        toks = line.split()
        if layout and toks[0].isdigit():
            per = 4
            fixed = 5 if has_root else 4
            if len(toks) != fixed + 2 * per:
                raise ParseError(TOOL, f"result row has {len(toks)} columns: {line[:80]!r}")
            try:
                rows.append(
                    NcclRow(
                        size_bytes=int(toks[0]),
                        count=int(toks[1]),
                        dtype=toks[2],
                        redop=toks[3],
                        root=int(toks[4]) if has_root else None,
                        out_of_place=_point(toks[fixed : fixed + per], layout == "old"),
                        in_place=_point(toks[fixed + per :], layout == "old"),
                    )
                )
            except ValueError as exc:
                raise ParseError(TOOL, f"unreadable result row {line[:80]!r}: {exc}") from exc
            continue
        if _FAIL.search(line):
            failures.append(line)
        # anything else (NCCL INFO lines, hostnames, warnings) is interleaved noise
    if layout is None and not failures:
        raise ParseError(TOOL, "no nccl-tests result table found", hint="is this *_perf output?")
    return NcclResult(
        layout=layout or "unknown",
        rows=tuple(rows),
        ranks=tuple(ranks),
        avg_busbw_gbytes_s=avg,
        out_of_bounds=oob,
        out_of_bounds_ok=oob_ok,
        nccl_version=version,
        params=params,
        failures=tuple(failures),
    )
