"""Bandwidth and diagnostics rules: measured figures against the SKU's bands.

Each figure is the median of its runs; the band (thresholds.py) decides PASS/WARN/FAIL and
the measurement goes into the report. A figure measured per NIC rail (ib_write_bw at the
full level) is judged on its slowest rail, named in the result. A probe that did not
measure - tool missing, timeout, unreadable output, pre-condition unmet, a pair nobody
could be blamed for - is ERROR. A probe the host's MIG layout keeps from running (CUDA sees
MIG devices, not boards; see gpuboot/probes) makes its rule not applicable, with the reason.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace

from gpuboot.bundle.model import Evidence
from gpuboot.bundle.names import PRECONDITIONS_FILE
from gpuboot.checks.base import (
    ERROR,
    FAIL,
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    Result,
    forms_in,
    not_applicable,
    parsed,
    probes_matching,
    tool_failure,
)
from gpuboot.checks.smi import gpu_inventory, incomplete
from gpuboot.checks.thresholds import band, measurement
from gpuboot.errors import GpubootError
from gpuboot.evidence.dcgmi import harness_fault, status_word
from gpuboot.evidence.forms import parser_of
from gpuboot.evidence.nccl import parse_all_reduce_perf
from gpuboot.evidence.perftest import parse_ib_write_bw
from gpuboot.probes import NVBW_TESTS, dcgm_refuses_mig, mig_gpus
from gpuboot.probes.tcpbw import parse_tcpbw


def _precondition(evidence: Evidence) -> None:
    pre = evidence.get(PRECONDITIONS_FILE)
    if pre is not None and pre.stdout.strip():
        reasons = "; ".join(ln.removeprefix("busy: ") for ln in pre.stdout.splitlines() if ln)
        raise ProbeFailed(f"pre-condition not met: {reasons}", where=PRECONDITIONS_FILE)


def _mig_on(ctx: NodeContext) -> Result | None:
    """Not applicable where the layout enables MIG: node_probes ran no whole-GPU CUDA probe."""
    gpus = mig_gpus(ctx.hostvars)
    if not gpus:
        return None
    return not_applicable(
        f"MIG enabled on GPU {','.join(map(str, gpus))} by the host's layout: whole-GPU "
        "bandwidth is not measurable; certify with MIG off to measure it"
    )


def _absent(ctx: NodeContext, tool_var: str | None, what: str) -> Result:
    """No probe file: not asked for (level none, stack lacks the tool) or an ERROR."""
    level = ctx.meta.get("probes")
    if level in (None, "none"):
        return not_applicable(f"probe level {level or 'unknown'}: {what} not run")
    if tool_var and not ctx.var(tool_var):
        return not_applicable(f"the host's stack does not provide {what} ({tool_var} unset)")
    raise MissingEvidence(f"{what} was not collected", where=what)


def _judge(figure: str, samples: list[float], ctx: NodeContext, detail: str = "") -> Result:
    b = band(figure, ctx.profile, ctx.hostvars)
    if b is None:
        return not_applicable(f"the profile gives no figure for {figure}")
    m = measurement(figure, samples, b)
    text = (
        f"{figure} {m['value']:g} {b.unit} (median of {len(samples)}), "
        f"warn below {m['warn_below']:g}, fail below {m['fail_below']:g}"
    )
    if m["pct_of_limit"] is not None:
        text += f", {m['pct_of_limit']:g}% of the {b.physical_limit:g} {b.unit} limit"
    return Result(m["status"], text + (f"; {detail}" if detail else ""), measurements=[m])


# The SM-copy testcase of each copy-engine one the probes run: the same copy over the same link,
# judged against the same band (a hand-run `nvbandwidth -t ..._sm` or an all-testcase run).
NVBW_SM_TESTS = {
    "nvbandwidth_h2d": "host_to_device_memcpy_sm",
    "nvbandwidth_d2h": "device_to_host_memcpy_sm",
    "nvbandwidth_d2d": "device_to_device_memcpy_read_sm",
}
_NVBW_JUDGED = frozenset(NVBW_TESTS.values()) | frozenset(NVBW_SM_TESTS.values())


def nvbandwidth_check(figure: str) -> Callable[[Evidence, NodeContext], Result]:
    tests = (NVBW_TESTS[figure], NVBW_SM_TESTS[figure])

    def check(evidence: Evidence, ctx: NodeContext) -> Result:
        if figure == "nvbandwidth_d2d" and int(ctx.hardware["gpu"]["count"]) < 2:
            return not_applicable("one GPU: no device-to-device copy")
        if mig := _mig_on(ctx):
            return mig
        _precondition(evidence)
        samples, worst, unjudged, gaps = [], "", set(), []
        gpus = gpu_inventory(evidence)
        for name, form, out in forms_in(evidence, "nvbandwidth"):
            if why := tool_failure("nvbandwidth", out):
                raise ProbeFailed(why, where=name)
            # three figures (h2d, d2h, d2d) read each run: parsed once, in whichever form
            run = parsed(parser_of("nvbandwidth", form), out.stdout)
            unjudged |= {t.name for t in run.tests if t.name not in _NVBW_JUDGED}
            for case in (t for t in run.tests if t.name in tests):
                low, worst, short = _nvbw_case(case, name, gpus)
                samples.append(low)
                if short:
                    gaps.append((short, name))
        if not samples:
            return _absent(ctx, "cuda_toolkit_version", f"nvbandwidth {tests[0]}")
        if unjudged:  # said, never silently dropped: no profile band measures them
            names = sorted(unjudged)
            more = f" (+{len(names) - 4} more)" if len(names) > 4 else ""
            worst += f"; not judged (no band): {', '.join(names[:4])}{more}"
        result = _judge(figure, samples, ctx, worst)
        if gaps:  # GPUs not measured: a copy below band among those measured is still seen
            gap = "; ".join(g for g, _n in gaps)
            if result.status != FAIL:
                raise incomplete(gap, gaps[0][1])
            return replace(result, reason=f"{result.reason} (the rest not read: {gap})")
        return result

    return check


def _nvbw_case(case, name: str, gpus: int | None) -> tuple[float, str, str | None]:
    """(slowest cell, where, what it did not measure) of one passed testcase; ERROR for one
    that did not pass (waived, or stopped by nvbandwidth's own assertion) or is empty."""
    test = case.name
    if case.status != "Passed":
        why = f": {case.error}" if case.error else ""
        raise ProbeFailed(f"{test} {case.status}{why}", where=name)
    cells = [(i, j, v) for i, row in enumerate(case.matrix) for j, v in enumerate(row)]
    vals = [c for c in cells if c[2] is not None]
    if not vals:
        raise ProbeFailed(f"{test}: empty matrix", where=name)
    width = max(len(row) for row in case.matrix)  # a column per GPU measured
    short = None
    if gpus is not None and width < gpus:
        short = f"{test} measured {width} of the node's {gpus} GPUs"
    i, j, low = min(vals, key=lambda c: c[2])
    where = f"pair {i}->{j}" if len(case.matrix) > 1 else f"GPU {j}"
    return low, f"slowest {where} ({test})", short


def check_all_reduce(evidence: Evidence, ctx: NodeContext) -> Result | str:
    if int(ctx.hardware["gpu"]["count"]) < 2:
        return not_applicable("one GPU: no collective to measure")
    if mig := _mig_on(ctx):
        return mig
    _precondition(evidence)
    samples = []
    for name, _form, out in forms_in(evidence, "all_reduce"):
        res = parse_all_reduce_perf(out.stdout) if out.stdout.strip() else None
        if res is None or not res.completed:
            why = tool_failure("all_reduce_perf", out) or (
                res.failures[0] if res and res.failures else "no result rows"
            )
            raise ProbeFailed(why, where=name)
        if res.wrong_total:
            return f"{res.wrong_total} wrong element(s) in {name}: data corruption in a collective"
        largest = max(res.rows, key=lambda r: r.size_bytes)
        samples.append(largest.out_of_place.busbw_gbytes_s)
    if not samples:
        return _absent(ctx, "cuda_toolkit_version", "all_reduce_perf")
    return _judge("all_reduce_busbw", samples, ctx, "busbw at the largest size")


# Tests DCGM skips by design unless separately installed or supported on the SKU: their
# skip is no gap in what the level asked for (the EUD ships apart; the pulse test runs on
# some SKUs only).
DCGM_OPTIONAL = ("eud", "pulse")


def check_dcgm(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Each DCGM test per GPU, by the reason DCGM gives: a test that ran and failed is FAIL
    naming its GPU(s) and DCGM's reason; one that could not run (skipped, not supported, a
    helper or plugin missing, an internal error of the test) is ERROR: the harness, not the
    GPU. Table and JSON output of DCGM 2.x-4.x read alike (evidence/dcgmi.py)."""
    if dcgm_refuses_mig(ctx.profile, ctx.hostvars):
        return not_applicable(
            "the host's MIG layout splits a GPU and dcgmi diag refuses such a MIG configuration, "
            "so it was not run; certify with MIG off to run it"
        )
    _precondition(evidence)
    files = sorted(forms_in(evidence, "dcgmi_diag"), key=lambda f: f[0])  # by name: -r_1 first
    if not files:
        return _absent(ctx, "dcgm_version", "dcgmi diag")
    failed: dict[str, str] = {}
    not_run: dict[str, str] = {}
    for name, form, out in files:
        if out.rc not in (0, 226) and not out.stdout.strip():  # 226: some tests failed
            raise ProbeFailed(tool_failure("dcgmi", out) or "dcgmi failed", where=name)
        parse = parser_of("dcgmi_diag", form)
        try:
            diag = parse(out.stdout)
        except GpubootError:
            said = [ln.strip() for ln in out.stdout.splitlines() if ln.startswith("Error")]
            why = tool_failure("dcgmi", out) or ("; ".join(said) if said else None)
            if why:
                raise ProbeFailed(f"dcgmi diag did not run: {why}", where=name) from None
            raise
        for test, verdict, text in _dcgm_tests(diag):
            (failed if verdict == FAIL else not_run).setdefault(test, text)
    if failed:
        extra = f"; not run: {'; '.join(not_run.values())}" if not_run else ""
        return "DCGM diagnostics failed: " + "; ".join(failed.values()) + extra
    if not_run:
        return Result(
            ERROR,
            "DCGM test(s) could not run (not a GPU fault): " + "; ".join(not_run.values()),
            action="fix the DCGM installation or the run's conditions the reason names "
            "(missing plugin or helper, CUDA/driver mismatch, test not allowed), then run it again",
        )
    return None


def _dcgm_tests(diag) -> list[tuple[str, str, str]]:
    """(test, FAIL or ERROR, text) for each test that did not pass, with its GPUs and reason."""
    out = []
    for test in dict.fromkeys(r.test for r in diag.results):
        rows = [r for r in diag.results if r.test == test]
        words = {status_word(r.result) for r in rows}
        reasons = diag.reasons(test)
        if "fail" in words:
            gpus = sorted(
                {g for r in rows if status_word(r.result) == "fail" for g in r.gpus}
                | {n.gpu for n in diag.notes if n.test == test and n.kind != "info" and n.gpu},
                key=int,
            )
            hardware = [t for t in reasons if not harness_fault(t)]
            where = f" on GPU {', '.join(gpus)}" if gpus else ""
            why = _short(hardware or reasons)
            if reasons and not hardware:
                out.append((test, ERROR, f"{test}: {harness_fault(reasons[0])} ({why})"))
            else:
                out.append((test, FAIL, f"{test} failed{where}" + (f": {why}" if why else "")))
        elif (
            words & {"skip", "not run"}
            and "pass" not in words
            and not any(k in test.lower() for k in DCGM_OPTIONAL)
        ):
            why = f" ({_short(reasons)})" if reasons else ""
            out.append((test, ERROR, f"{test} {'/'.join(sorted(words))}{why}"))
    return out


def _short(texts: tuple[str, ...] | list[str], limit: int = 200) -> str:
    text = " / ".join(texts)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pair_check(
    kind: str, pattern: str, read: Callable[[str], float]
) -> Callable[[Evidence, NodeContext], Result]:
    """A pair probe's rule: the attribution (who is to blame) comes from the run's meta;
    offline bundles without it are judged from the files alone."""

    def check(evidence: Evidence, ctx: NodeContext) -> Result:
        if kind == "ib_write_bw" and not ctx.hardware["nics"]:
            return not_applicable("no RDMA NIC on this SKU")
        verdict = (ctx.meta.get("pairs") or {}).get(kind, {}).get(ctx.host)
        if verdict is not None:
            status = verdict["status"]
            if status == "none":
                return not_applicable(verdict["reason"])
            if status == "unattributed":
                return Result(ERROR, verdict["reason"])
            if status == "pinned":
                return Result(FAIL, verdict["reason"])
            groups: dict[str, list[float]] = {}
            for r in verdict.get("runs", []):
                if r["ok"] and r["value"]:
                    groups.setdefault(r.get("rail", ""), []).append(r["value"])
            if groups:
                runs = sum(len(v) for v in groups.values())
                detail = f"{runs} good pair run(s)"
                if verdict.get("reason", "ok") != "ok":  # cleared by a re-test: say so
                    detail += f"; {verdict['reason']}"
                return _judge_slowest(kind, groups, ctx, detail)
        files = probes_matching(evidence, pattern)
        if not files:
            if verdict is None and ctx.meta.get("probes") not in (None, "none"):
                tool = "doca_ofed_enabled" if kind == "ib_write_bw" else None
                return _absent(ctx, tool, kind)
            return not_applicable(f"{kind}: no pair probe in this run")
        by_rail: dict[str, list[float]] = {}
        hcas = [n["hca"] for n in ctx.hardware["nics"]] if kind == "ib_write_bw" else []
        for name, out in files.items():
            rail = next((h for h in hcas if f"_-d_{h}_" in name), "")
            if why := tool_failure(kind, out):  # no attribution: a failed run is unexplained
                raise ProbeFailed(f"{name}: {why}", where=name)
            try:
                by_rail.setdefault(rail, []).append(read(out.stdout))
            except GpubootError as exc:
                raise ProbeFailed(f"{name}: {tool_failure(kind, out) or exc}", where=name) from None
        return _judge_slowest(kind, by_rail, ctx)

    return check


def _judge_slowest(
    kind: str, by_rail: dict[str, list[float]], ctx: NodeContext, detail=""
) -> Result:
    """Every rail must be within band: judge the one with the lowest median, by name."""
    rail, samples = min(by_rail.items(), key=lambda kv: statistics.median(kv[1]))
    if len(by_rail) > 1:
        detail = f"slowest of {len(by_rail)} rails: {rail}" + (f"; {detail}" if detail else "")
    return _judge(kind, samples, ctx, detail)


def _ib_value(text: str) -> float:
    res = parse_ib_write_bw(text)
    bws = [r.bw_average_gbits_s for r in res.runs if r.bw_average_gbits_s is not None]
    if res.aborted:  # the sizes before the abort are no measurement of the link
        rows = sum(len(r.rows) for r in res.runs)
        raise ProbeFailed(
            f"ib_write_bw aborted after {rows} row(s): {'; '.join(res.errors[-3:])}; the rows "
            "printed before the abort are not a measurement"
        )
    if res.errors:  # as the pair phase reads a run (probes/pairs.py): any error is no result
        raise ProbeFailed(f"ib_write_bw failed: {res.errors[0]}")
    if not bws:
        raise ProbeFailed("ib_write_bw printed no bandwidth row")
    return max(bws)


def _tcp_value(text: str) -> float:
    return parse_tcpbw(text).gbits_s


check_ib_write_bw = pair_check("ib_write_bw", "ib_write_bw*", _ib_value)
check_tcp_bw = pair_check("tcp_bw", "tcp_bw_*", _tcp_value)
