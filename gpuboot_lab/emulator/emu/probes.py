"""Bandwidth probes that run on one node: nvbandwidth and nccl-tests' all_reduce_perf.

Figures come from the profile's `bandwidth:` section (what a healthy node measures), scaled
by what the faults take away (PCIe downtraining, NVLinks down, throttling, low-bandwidth)
plus ~1% run-to-run noise. Both refuse to run the way CUDA does when it cannot initialise.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sys
import time
from typing import Any, NoReturn

from . import fabric, faults, jsonfmt, kmod, model, state
from .model import Gpu
from .state import Node

NOISE = 0.01


class CudaError(Exception):
    def __init__(self, name: str, text: str):
        super().__init__(text)
        self.name = name
        self.text = text


def cuda_init(node: Node) -> None:
    """Raise the error cuInit would return on this node."""
    if "nvidia" not in kmod.loaded(node):
        raise CudaError("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected")
    if model.module_version(node, "nvidia") != model.read_userspace("nvml"):
        raise CudaError(
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
            "system has unsupported display driver / cuda driver combination",
        )
    # HGX GPUs stay unusable until fabric manager has trained the NVSwitch fabric.
    nvswitch = int(model.hw(node).get("nvlink", {}).get("nvswitch_count", 0) or 0)
    if nvswitch and fabric.gpu_fabric_state(node) != ("Completed", "Success"):
        raise CudaError("CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized")
    if "nvidia_uvm" not in kmod.loaded(node):
        if kmod.installed("nvidia_uvm") is None:
            raise CudaError("CUDA_ERROR_UNKNOWN", "unknown error")
        # nvidia-modprobe (setuid, from the driver) loads nvidia-uvm on first CUDA use.
        try:
            with state.transaction() as tx:
                kmod.load(tx, "nvidia_uvm")
        except OSError:  # not root: nobody may load it for us
            raise CudaError("CUDA_ERROR_UNKNOWN", "unknown error") from None


def low_bw(node: Node, probe: str, hca: str | None = None) -> float:
    """What low-bandwidth faults leave of PROBE's healthy figure (on NIC HCA, for the
    faults that name one). Every probe asks before it measures: a probe-hang fault on PROBE
    stops it here for good."""
    if any(f["args"] == [probe] for f in model.faults_of(node, "probe-hang")):
        _hang()
    factor = 1.0
    for f in model.faults_of(node, "low-bandwidth"):
        if f["args"][0] == probe and f["args"][2:] in ([], [hca]):
            factor *= float(f["args"][1])
    return factor


def _hang() -> NoReturn:
    """Never return, deaf to SIGTERM (a tool in uninterruptible sleep outlives `timeout`);
    the session's end (SIGHUP, SIGKILL) still ends it, so the lab is left clean."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(3600)


def pcie_factor(g: Gpu) -> float:
    lane = faults.LANE_MBPS
    return (lane[g.pcie_gen] * g.pcie_width) / (lane[g.pcie_gen_max] * g.pcie_width_max)


def link_factor(g: Gpu) -> float:
    return sum(g.links) / len(g.links) if g.links else 1.0


def noisy(value: float) -> float:
    return value * random.uniform(1 - NOISE, 1 + NOISE)


def usable_gpus(node: Node) -> list[Gpu]:
    return [g for g in model.gpus(node) if not g.lost and not g.mig_current]


# --- nvbandwidth ------------------------------------------------------------------------------

# name -> (description, kind); kind picks the model below
NVBW_TESTS: list[tuple[str, str, str]] = [
    ("host_to_device_memcpy_ce", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "h2d"),
    ("device_to_host_memcpy_ce", "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "d2h"),
    (
        "host_to_device_bidirectional_memcpy_ce",
        "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "h2d_bi",
    ),
    (
        "device_to_host_bidirectional_memcpy_ce",
        "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)",
        "d2h_bi",
    ),
    (
        "device_to_device_memcpy_read_ce",
        "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
        "d2d",
    ),
    (
        "device_to_device_memcpy_write_ce",
        "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
        "d2d",
    ),
    (
        "device_to_device_bidirectional_memcpy_read_ce",
        "memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)",
        "d2d_bi",
    ),
    (
        "device_to_device_bidirectional_memcpy_write_ce",
        "memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)",
        "d2d_bi",
    ),
    ("all_to_host_memcpy_ce", "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)", "d2h"),
    ("host_to_all_memcpy_ce", "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "h2d"),
    ("host_to_device_memcpy_sm", "memcpy SM CPU(row) -> GPU(column) bandwidth (GB/s)", "h2d_sm"),
    ("device_to_host_memcpy_sm", "memcpy SM CPU(row) <- GPU(column) bandwidth (GB/s)", "d2h_sm"),
    (
        "device_to_device_memcpy_read_sm",
        "memcpy SM GPU(row) -> GPU(column) bandwidth (GB/s)",
        "d2d_sm",
    ),
    (
        "device_to_device_memcpy_write_sm",
        "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)",
        "d2d_sm",
    ),
    ("host_device_latency_sm", "memory latency SM CPU(row) <-> GPU(column) (ns)", "lat"),
]


def _d2d(node: Node, a: Gpu, b: Gpu, base: float) -> float:
    links = a.links and b.links
    if links and sum(a.links) and sum(b.links):
        return base * min(link_factor(a), link_factor(b))
    if links:  # NVLink gone on one side: peer traffic falls back to PCIe through the host
        h2d = float(node.profile["bandwidth"]["nvbandwidth"]["h2d_gbps"])
        return 0.85 * h2d * min(pcie_factor(a), pcie_factor(b))
    return base * min(pcie_factor(a), pcie_factor(b))  # PCIe-only board: P2P over PCIe


def nvbw_matrix(node: Node, gpus: list[Gpu], kind: str) -> list[list[float | None]]:
    bw = node.profile["bandwidth"]["nvbandwidth"]
    h2d, d2h = float(bw["h2d_gbps"]), float(bw["d2h_gbps"])
    d2d = float(bw.get("d2d_gbps", 0.85 * h2d))
    f = low_bw(node, "nvbandwidth")
    sm = {g.slot: (0.8 if g.thermal else 1.0) for g in gpus}
    if kind in ("h2d", "d2h", "h2d_bi", "d2h_bi", "h2d_sm", "d2h_sm", "lat"):
        base = {
            "h2d": h2d,
            "h2d_bi": 0.93 * h2d,
            "h2d_sm": 0.98 * h2d,
            "d2h": d2h,
            "d2h_bi": 0.93 * d2h,
            "d2h_sm": 0.98 * d2h,
        }.get(kind, 0.0)
        if kind == "lat":
            return [[noisy(650.0 / max(pcie_factor(g), 0.25)) for g in gpus]]
        return [
            [
                noisy(base * pcie_factor(g) * f * (sm[g.slot] if kind.endswith("sm") else 1))
                for g in gpus
            ]
        ]
    scale = {"d2d": 1.0, "d2d_bi": 0.95, "d2d_sm": 1.03}[kind]
    return [
        [
            None
            if a is b
            else noisy(_d2d(node, a, b, d2d) * scale * f * (sm[a.slot] if kind == "d2d_sm" else 1))
            for b in gpus
        ]
        for a in gpus
    ]


def _cuda_versions(driver: str) -> int:
    major, _, minor = model.cuda_version(driver).partition(".")
    return int(major) * 1000 + int(minor or 0) * 10 if major.isdigit() else 0


def nvbandwidth(argv: list[str]) -> int:
    node = state.load()
    names = [t[0] for t in NVBW_TESTS]
    if "-l" in argv or "--list" in argv:
        sys.stdout.write("".join(f"{i}, {n}:\n\t{d}\n\n" for i, (n, d, _) in enumerate(NVBW_TESTS)))
        return 0
    wanted: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in ("-t", "--testcase"):
            for item in next(it, "").split(","):
                wanted.append(
                    names[int(item)] if item.isdigit() and int(item) < len(names) else item
                )
        elif arg.startswith("--testcase="):
            wanted += arg.split("=", 1)[1].split(",")
    unknown = [w for w in wanted if w not in names]
    if unknown:
        sys.stderr.write(f"ERROR: Testcase {unknown[0]} not found!\n")
        return 1
    tests = [t for t in NVBW_TESTS if not wanted or t[0] in wanted]
    try:
        cuda_init(node)
    except CudaError as exc:
        sys.stderr.write(
            f"[{exc.name}] {exc.text} in expression cuInit(0) in int main(int, "
            "char**)() : /nvbandwidth/nvbandwidth.cpp:171\n"
        )
        return 1
    node = state.load()
    gpus = usable_gpus(node)
    driver = model.module_version(node, "nvidia") or ""
    cuda = _cuda_versions(driver)
    results = []
    asserting = {f["args"][0] for f in model.faults_of(node, "nvbandwidth-assert")}
    for name, desc, kind in tests:
        if name in asserting:  # nvbandwidth exits at its own check: later testcases never run
            return _nvbw_assert(results, name, driver, cuda, gpus, "-j" in argv or "--json" in argv)
        peer = kind.startswith("d2d")
        if (peer and len(gpus) < 2) or not gpus:
            results.append({"name": name, "status": "Waived"})
            continue
        matrix = nvbw_matrix(node, gpus, kind)
        vals = [v for row in matrix for v in row if v is not None]
        results.append(
            {
                "name": name,
                "status": "Passed",
                "desc": desc,
                "matrix": matrix,
                "sum": sum(vals),
                "min": min(vals),
                "max": max(vals),
                "avg": sum(vals) / len(vals),
            }
        )
    if "-j" in argv or "--json" in argv:
        sys.stdout.write(_nvbw_json(results, driver, cuda))
    else:
        sys.stdout.write(_nvbw_text(results, driver, cuda, gpus))
    return 0


# What nvbandwidth prints when a copy's pattern check finds corrupted data (the capture
# a100-sxm4-80gb-8gpu-v0.7-d2d-read-ce-assert-pattern.txt): the check's two lines, then
# its ASSERT (error_handling.h), and exit 1.
NVBW_PATTERN_LINES = (
    " Invalid value when checking the pattern at 0x70a640000000",
    " Current offset : 11136 ",
)
NVBW_ASSERT = (
    "ASSERT in expression h_errorFlag == 0 in void memcmpPatternHelper(CUstream, CUdeviceptr, "
    "long long unsigned int, unsigned int, CompareKernelFunc, std::shared_ptr<NodeHelper>)() : "
    "/nvbandwidth/memcpy.cpp:165"
)


def _nvbw_assert(
    results: list[dict[str, Any]], name: str, driver: str, cuda: int, gpus: list[Gpu], as_json: bool
) -> int:
    """The run up to testcase NAME, stopped there by nvbandwidth's ASSERT: the text form ends
    with the assertion; -j records it as the document's "error" beside the testcase left
    "Running" and prints the document (its recordError), then exits."""
    if as_json:
        sys.stdout.write("\n".join(NVBW_PATTERN_LINES) + "\n")
        doc = json.loads(_nvbw_json(results, driver, cuda))
        body = doc["nvbandwidth"]
        body["testcases"].append({"name": name, "status": "Running"})
        body["error"] = NVBW_ASSERT + "\n"
        sys.stdout.write(jsonfmt.dumps(doc))
        return 1
    text = _nvbw_text(results, driver, cuda, gpus).split("NOTE:")[0]
    sys.stdout.write(f"{text}Running {name}.\n" + "\n".join(NVBW_PATTERN_LINES) + "\n")
    sys.stdout.write(NVBW_ASSERT + "\n")
    return 1


def _fmt_cell(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.6g}"


def _nvbw_json(results: list[dict[str, Any]], driver: str, cuda: int) -> str:
    """JsonCpp's styled layout (tabs, " : "), as nvbandwidth -j prints it."""
    cases = []
    for r in results:
        if r["status"] != "Passed":
            cases.append({"name": r["name"], "status": r["status"]})
            continue
        cases.append(
            {
                "average": r["avg"],
                "bandwidth_description": r["desc"] + " ",
                "bandwidth_matrix": [[_fmt_cell(v) for v in row] for row in r["matrix"]],
                "max": r["max"],
                "min": r["min"],
                "name": r["name"],
                "status": "Passed",
                "sum": r["sum"],
            }
        )
    doc = {
        "nvbandwidth": {
            "CUDA Runtime Version": cuda,
            "Driver Version": driver,
            "git_version": "",
            "testcases": cases,
            "version": "v0.5",
        }
    }
    return jsonfmt.dumps(doc)


def _nvbw_text(results: list[dict[str, Any]], driver: str, cuda: int, gpus: list[Gpu]) -> str:
    out = [
        "nvbandwidth Version: v0.5",
        "Built from Git version: ",
        "",
        f"CUDA Runtime Version: {cuda}",
        f"CUDA Driver Version: {cuda}",
        f"Driver Version: {driver}",
        "",
    ]
    out += [f"Device {i}: {g.name} ({g.bus_id[:-2]})" for i, g in enumerate(gpus)]
    out.append("")
    for r in results:
        out.append(f"Running {r['name']}.")
        if r["status"] != "Passed":
            out.append("Waived. ")
            out.append("")
            continue
        out.append(r["desc"])
        cols = len(r["matrix"][0])
        out.append("   " + "".join(f"{j:>10}" for j in range(cols)))
        for i, row in enumerate(r["matrix"]):
            out.append(
                f"{i:>3}" + "".join(f"{'N/A' if v is None else f'{v:.2f}':>10}" for v in row)
            )
        out.append("")
        out.append(f"SUM {r['name']} {r['sum']:.2f}")
        out.append("")
    out.append("NOTE: The reported results may not reflect the full capabilities of the platform.")
    out.append("Performance can vary with software drivers, hardware clocks, and system topology.")
    return "\n".join(out) + "\n"


# --- all_reduce_perf ------------------------------------------------------------------------


def parse_size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


def busbw_peak(node: Node, gpus: list[Gpu]) -> float:
    """busbw a healthy node reaches at large sizes, degraded by the slowest GPU."""
    peak = float(node.profile["bandwidth"]["all_reduce_busbw_gbps"])
    nvlink = bool(gpus and gpus[0].links)
    worst = 1.0
    for g in gpus:
        if nvlink:
            f = link_factor(g)
            if f == 0:  # this GPU talks over PCIe only: the ring runs at PCIe speed
                h2d = float(node.profile["bandwidth"]["nvbandwidth"]["h2d_gbps"])
                f = 0.8 * h2d * pcie_factor(g) / peak
        else:
            f = pcie_factor(g)
        if g.thermal:
            f *= 0.85
        worst = min(worst, f)
    return peak * worst * low_bw(node, "all_reduce_perf")


def all_reduce_perf(argv: list[str]) -> int:
    opts = {
        "-b": "32M",
        "-e": "32M",
        "-f": "2",
        "-g": "1",
        "-n": "20",
        "-w": "5",
        "-c": "1",
        "-d": "float",
        "-o": "sum",
        "-t": "1",
        "-G": "0",
    }
    long = {
        "--minbytes": "-b",
        "--maxbytes": "-e",
        "--stepfactor": "-f",
        "--ngpus": "-g",
        "--iters": "-n",
        "--warmup_iters": "-w",
        "--check": "-c",
        "--datatype": "-d",
        "--op": "-o",
        "--nthreads": "-t",
        "--cudagraph": "-G",
    }
    it = iter(argv)
    for arg in it:
        key, eq, val = arg.partition("=")
        key = long.get(key, key)
        if key in opts:
            opts[key] = val if eq else next(it, opts[key])
    node = state.load()
    host = socket.gethostname()
    pid = os.getpid()
    ngpus = int(opts["-g"])
    minb, maxb = parse_size(opts["-b"]), parse_size(opts["-e"])
    step = max(2, int(opts["-f"]))
    out = [
        f"# nThread {opts['-t']} nGpus {ngpus} minBytes {minb} maxBytes {maxb} step: "
        f"{step}(factor) warmup iters: {opts['-w']} iters: {opts['-n']} agg iters: 1 "
        f"validation: {opts['-c']} graph: {opts['-G']}",
        "#",
        "# Using devices",
    ]
    try:
        cuda_init(node)
    except CudaError as exc:
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.write(
            f"{host}: Test CUDA failure common.cu:1032 '{exc.text}'\n"
            f" .. {host} pid {pid}: Test failure common.cu:891\n"
        )
        return 3
    node = state.load()
    gpus = usable_gpus(node)
    if ngpus > len(gpus):
        out += [
            f"#  Rank {r:>2} Group  0 Pid {pid:>6} on {host:>10} device {r:>2} "
            f"[{gpus[r].bus4[:-2].lower() if r < len(gpus) else '0000:00:00'}] "
            f"{gpus[r].name if r < len(gpus) else ''}".rstrip()
            for r in range(ngpus)
        ]
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.write(
            f"{host}: Test CUDA failure common.cu:1032 'invalid device ordinal'\n"
            f" .. {host} pid {pid}: Test failure common.cu:891\n"
        )
        return 3
    used = gpus[:ngpus]
    for r, g in enumerate(used):
        out.append(
            f"#  Rank {r:>2} Group  0 Pid {pid:>6} on {host:>10} device {r:>2} "
            f"[{g.bus4[:-2].lower()}] {g.name}"
        )
    out += [
        "#",
        f"NCCL version {model.read_userspace('nccl') or '2.21.5'}+cuda"
        f"{model.cuda_version(model.module_version(node, 'nvidia') or '')}",
        "#",
        "#                                                              out-of-place      "
        "                 in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw "
        "#wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)    "
        "        (us)  (GB/s)  (GB/s)       ",
    ]
    n = len(used)
    ratio = 2 * (n - 1) / n if n > 1 else 1.0
    peak_bus = busbw_peak(node, used) if n > 1 else 0.0
    elem = {"float": 4, "half": 2, "double": 8, "int32": 4, "int8": 1, "bfloat16": 2}.get(
        opts["-d"], 4
    )
    latency_us = 8.0 + 2.0 * n
    sizes = []
    size = minb
    while size <= maxb:
        sizes.append(size)
        size *= step
    busbws = []
    for size in sizes:
        count = size // elem
        if n > 1:
            alg_peak = peak_bus / ratio
            eff = size / (size + 24e6)  # protocol/pipeline ramp to the plateau
            times = [latency_us + size / (alg_peak * max(eff, 1e-6) * 1e3) for _ in range(2)]
            times = [noisy(t) for t in times]
        else:
            times = [noisy(4.0 + size / 1.5e6), noisy(4.0 + size / 1.5e6)]
        cells = []
        for t in times:
            alg = size / t / 1e3
            bus = alg * ratio if n > 1 else 0.0
            cells.append(f"  {_time_str(t)}  {alg:6.2f}  {bus:6.2f}  {0:>5}")
        busbws.append(size / times[0] / 1e3 * ratio if n > 1 else 0.0)
        out.append(
            f"{size:>12}  {count:>12}  {opts['-d']:>8}  {opts['-o']:>6}  {-1:>6}" + "".join(cells)
        )
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.6g} ", "#", ""]
    sys.stdout.write("\n".join(out))
    return 0


def _time_str(us: float) -> str:
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"
