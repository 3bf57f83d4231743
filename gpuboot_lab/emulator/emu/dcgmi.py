"""dcgmi (DCGM 3.x CLI): `diag -r 1..4 [-j]` and `discovery -l`, through nv-hostengine.

The diagnostic reads the same model as the other shims, so a fault shows up in the test a
real DCGM run would fail (persistence off, row remap pending, PCIe downtrained, NVLink
down, thermal slowdown, CUDA not initialisable without fabric manager).
"""

from __future__ import annotations

import sys
import textwrap
from dataclasses import dataclass, field

from . import daemons, jsonfmt, kmod, model, probes, state
from .model import Gpu
from .state import Node

NO_ENGINE = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection "
    "invalid/disconnected.\n"
)


@dataclass
class Test:
    category: str
    name: str
    per_gpu: bool
    fails: dict[int, str] = field(default_factory=dict)  # gpu index -> warning
    skip: bool = False
    global_fail: str | None = None


def _tests(level: int) -> list[Test]:
    tests = [
        Test("Deployment", n, False)
        for n in (
            "Denylist",
            "NVML Library",
            "CUDA Main Library",
            "Permissions and OS Blocks",
            "Persistence Mode",
            "Environment Variables",
            "Page Retirement/Row Remap",
            "Graphics Processes",
            "Inforom",
        )
    ]
    if level >= 2:
        tests += [
            Test("Integration", "PCIe", True),
            Test("Hardware", "GPU Memory", True),
            Test("Hardware", "Diagnostic", True),
        ]
    if level >= 3:
        tests += [
            Test("Stress", "Targeted Stress", True),
            Test("Stress", "Targeted Power", True),
            Test("Stress", "Memory Bandwidth", True),
            Test("Stress", "EUD Test", True, skip=True),
        ]
    if level >= 4:
        tests += [Test("Hardware", "Memtest", True), Test("Stress", "Pulse Test", True)]
    return tests


def _evaluate(node: Node, gpus: list[Gpu], tests: list[Test]) -> None:
    by = {t.name: t for t in tests}
    cuda_err = None
    try:
        probes.cuda_init(node)
    except probes.CudaError as exc:
        cuda_err = exc.text
    if cuda_err:
        by["CUDA Main Library"].global_fail = f"Error using CUDA API cuInit: {cuda_err}"
    for g in gpus:
        i = g.index
        if g.lost:
            for t in tests:
                if t.per_gpu:
                    t.fails[i] = f"GPU {i} is inaccessible: it has fallen off the bus"
            continue
        if not g.persistence:
            by["Persistence Mode"].fails[i] = (
                f"Persistence mode for GPU {i} is currently disabled. The DCGM diagnostic "
                "requires peristence mode to be enabled. Enable persistence mode by running "
                '"nvidia-smi -i <gpuId> -pm 1 " as root.'
            )
        if g.remap_failure:
            by["Page Retirement/Row Remap"].fails[i] = (
                f"GPU {i} had uncorrectable memory errors and row remapping failed. Run a field "
                "diagnostic on the GPU."
            )
        elif g.remap_pending:
            by["Page Retirement/Row Remap"].fails[i] = (
                f"GPU {i} had uncorrectable memory errors and row remappings are pending. "
                "Reset the GPU to activate the remapping."
            )
        if "PCIe" in by:
            if g.pcie_gen < g.pcie_gen_max or g.pcie_width < g.pcie_width_max:
                by["PCIe"].fails[i] = (
                    f"GPU {i} PCIe link is Gen{g.pcie_gen} x{g.pcie_width}, expected "
                    f"Gen{g.pcie_gen_max} x{g.pcie_width_max}."
                )
            down = [n for n, up in enumerate(g.links) if not up]
            if down:
                by["PCIe"].fails[i] = (
                    f"GPU {i}'s NvLink link {down[0]} is currently down Check DCGM and system "
                    "logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics."
                )
        if "GPU Memory" in by and g.dram_uncorr_vol:
            by["GPU Memory"].fails[i] = (
                f"Detected {g.dram_uncorr_vol} double-bit ECC error(s) on GPU {i}."
            )
        if g.thermal:
            for name in ("Targeted Stress", "Targeted Power", "Diagnostic"):
                if name in by:
                    by[name].fails[i] = (
                        f"Clocks are being throttled for GPU {i} because of clock event "
                        "reasons: HW thermal slowdown. Check the cooling of the GPU."
                    )
        if cuda_err:
            for t in tests:
                if t.per_gpu and not t.skip and t.name not in ("PCIe",):
                    t.fails.setdefault(i, f"GPU {i}: CUDA initialization failed: {cuda_err}")


def _result(t: Test, gpus: list[Gpu]) -> tuple[str, list[str]]:
    """The Result column and the warnings below it."""
    if t.skip:
        return "Skip - All", []
    if t.global_fail:
        return "Fail", [t.global_fail]
    if not t.fails:
        return ("Pass - All" if t.per_gpu else "Pass"), []
    ids = ", ".join(str(i) for i in sorted(t.fails))
    label = "GPU" if len(t.fails) == 1 else "GPUs"
    head = f"Fail - {label}: {ids}" if t.per_gpu else "Fail"
    return head, [t.fails[i] for i in sorted(t.fails)]


def _cat_line(name: str, first: bool) -> str:
    edge = "|" if first else "+"
    left = f"-----  {name}  "
    return f"{edge}{left:-<27}+{'-' * 48}{edge}"


def _row(name: str, value: str) -> list[str]:
    lines = [f"| {name:<25} | {value:<46} |"]
    return lines


def _warning_rows(text: str) -> list[str]:
    chunks = textwrap.wrap(text, 46, break_long_words=True, break_on_hyphens=False) or [""]
    rows = [f"|   Warning                 | {chunks[0]:<46} |"]
    rows += [f"|                           | {c:<46} |" for c in chunks[1:]]
    return rows


def diag(node: Node, level: int, as_json: bool) -> tuple[str, int]:
    gpus = model.gpus(node)
    driver = model.module_version(node, "nvidia") or "N/A"
    dev_ids = ",".join(model.gpu_hw(node)["pci_device_id"][2:6].lower() for _ in gpus)
    tests = _tests(level)
    _evaluate(node, gpus, tests)
    if as_json:
        cats: dict[str, list[dict[str, object]]] = {}
        for t in tests:
            results: list[dict[str, object]] = []
            if t.per_gpu:
                for g in gpus:
                    status = "Skip" if t.skip else ("Fail" if g.index in t.fails else "Pass")
                    res: dict[str, object] = {"gpu_id": str(g.index), "status": status}
                    if g.index in t.fails:
                        res["warnings"] = [{"error_id": 1, "warning": t.fails[g.index]}]
                    results.append(res)
            else:
                head, warns = _result(t, gpus)
                res = {"status": head.split(" - ")[0]}
                if warns:
                    res["warnings"] = [{"error_id": 1, "warning": w} for w in warns]
                results.append(res)
            cats.setdefault(t.category, []).append({"name": t.name, "results": results})
        doc = {
            "DCGM GPU Diagnostic": {
                "test_categories": [{"category": c, "tests": ts} for c, ts in cats.items()],
                "version": daemons.dcgm_version(),
                "Driver Version Detected": driver,
                "GPU Device IDs": dev_ids.split(",") if dev_ids else [],
            }
        }
        return jsonfmt.dumps(doc), 0
    out = [
        "Successfully ran diagnostic for group.",
        "+---------------------------+------------------------------------------------+",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        _cat_line("Metadata", True),
    ]
    out += _row("DCGM Version", daemons.dcgm_version())
    out += _row("Driver Version Detected", driver)
    out += _row("GPU Device IDs Detected", dev_ids)
    current = None
    for t in tests:
        if t.category != current:
            current = t.category
            out.append(_cat_line(current, current == "Deployment"))
        head, warns = _result(t, gpus)
        out += _row(t.name, head)
        for w in warns:
            out += _warning_rows(w)
    out.append("+---------------------------+------------------------------------------------+")
    return "\n".join(out) + "\n", 0


def main(argv: list[str]) -> int:
    node = state.load()
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write("usage: dcgmi diag -r <1-4> [-j] | dcgmi discovery -l\n")
        return 0
    if argv[0] in ("-v", "--version"):
        sys.stdout.write(f"dcgmi  version: {daemons.dcgm_version()}\n")
        return 0
    if not kmod.pid_alive(node.vstate.get("hostengine_pid")):
        sys.stdout.write(NO_ENGINE)
        return 255
    if "nvidia" not in kmod.loaded(node):
        sys.stdout.write("Error: Unable to initialize NVML. Ensure the NVIDIA driver is loaded.\n")
        return 255
    if argv[0] == "discovery":
        gpus = model.gpus(node)
        sep = "+--------+" + "-" * 70 + "+"
        lines = [
            f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} found.",
            sep,
            f"| GPU ID | {'Device Information':<68} |",
            sep,
        ]
        for g in gpus:
            lines += [
                f"| {g.index:<6} | {'Name: ' + g.name:<68} |",
                f"|        | {'PCI Bus ID: ' + g.bus_id:<68} |",
                f"|        | {'Device UUID: ' + g.uuid:<68} |",
                sep,
            ]
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    if argv[0] == "diag":
        level = None
        for i, arg in enumerate(argv):
            if arg in ("-r", "--run") and i + 1 < len(argv):
                level = {"short": 1, "medium": 2, "long": 3, "xlong": 4}.get(
                    argv[i + 1], int(argv[i + 1]) if argv[i + 1].isdigit() else 0
                )
        if level not in (1, 2, 3, 4):
            sys.stdout.write("Error: Invalid run level. Valid values are 1, 2, 3 or 4.\n")
            return 255
        text, rc = diag(node, level, "-j" in argv or "--json" in argv)
        sys.stdout.write(text)
        return rc
    sys.stdout.write(f"Error: unsupported dcgmi command in this lab: {argv[0]}\n")
    return 255
