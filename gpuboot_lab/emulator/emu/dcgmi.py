"""dcgmi (DCGM 3.x and 4.x CLI, by the installed version): `diag -r 1..4 [-j]`,
`nvlink -s|-e -g N` and `discovery -l`, through nv-hostengine.

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


# DCGM 4.x renamed the tests (plugin names) and prints a row per GPU under each test.
V4_NAMES = {
    "Denylist": "software",
    "PCIe": "pcie",
    "GPU Memory": "memory",
    "Diagnostic": "diagnostic",
    "Targeted Stress": "targeted_stress",
    "Targeted Power": "targeted_power",
    "Memory Bandwidth": "memory_bandwidth",
    "EUD Test": "eud",
    "Memtest": "memtest",
    "Pulse Test": "pulse_test",
}


def _v4_tests(tests: list[Test]) -> list[Test]:
    """DCGM 4.x folds the deployment checks into one per-GPU "software" test."""
    deploy = [t for t in tests if t.category == "Deployment"]
    software = Test("Deployment", "software", True)
    for t in deploy:
        if t.global_fail:
            software.global_fail = software.global_fail or t.global_fail
        for i, why in t.fails.items():
            software.fails.setdefault(i, why)
    rest = [
        Test(t.category, V4_NAMES.get(t.name, t.name), True, t.fails, t.skip, t.global_fail)
        for t in tests
        if t.category != "Deployment"
    ]
    return [software, *rest]


def _v4_rows(t: Test, gpus: list[Gpu]) -> list[str]:
    """A 4.x test: its status, its warnings, then one `GPUn: status` row per GPU."""
    if t.skip:
        head = "Skip"
    elif t.global_fail or t.fails:
        head = "Fail"
    else:
        head = "Pass"
    lines = _row(t.name, head)
    for why in ([t.global_fail] if t.global_fail else []) + [t.fails[i] for i in sorted(t.fails)]:
        lines += _warning_rows(why)
    for g in gpus:
        status = "Skip" if t.skip else ("Fail" if g.index in t.fails or t.global_fail else "Pass")
        lines += _row("", f"GPU{g.index}: {status}")
    return lines


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


def _table_head(driver: str, dev_ids: str) -> list[str]:
    """The diag table's banner and Metadata rows (DCGM 3.x and 4.x print the same)."""
    out = [
        "Successfully ran diagnostic for group.",
        "+---------------------------+------------------------------------------------+",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        _cat_line("Metadata", True),
    ]
    out += _row("DCGM Version", daemons.dcgm_version())
    out += _row("Driver Version Detected", driver)
    return out + _row("GPU Device IDs Detected", dev_ids)


def diag(node: Node, level: int, as_json: bool) -> tuple[str, int]:
    gpus = model.gpus(node)
    driver = model.module_version(node, "nvidia") or "N/A"
    dev_ids = ",".join(model.gpu_hw(node)["pci_device_id"][2:6].lower() for _ in gpus)
    tests = _tests(level)
    _evaluate(node, gpus, tests)
    if daemons.dcgm_version().split(".")[0] >= "4":
        return _diag_v4(tests, gpus, driver, dev_ids, as_json)
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
    out = _table_head(driver, dev_ids)
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


def _diag_v4(
    tests: list[Test], gpus: list[Gpu], driver: str, dev_ids: str, as_json: bool
) -> tuple[str, int]:
    """DCGM 4.x: tests named by plugin, per-GPU rows; exit 226 when a test failed."""
    tests = _v4_tests(tests)
    failed = any(t.fails or t.global_fail for t in tests)
    rc = 226 if failed else 0
    if as_json:
        cats: dict[str, list[dict[str, object]]] = {}
        for t in tests:
            results: list[dict[str, object]] = []
            for g in gpus:
                bad = g.index in t.fails or bool(t.global_fail)
                status = "Skip" if t.skip else ("Fail" if bad else "Pass")
                res: dict[str, object] = {
                    "entity_group": "GPU",
                    "entity_group_id": 1,
                    "entity_id": g.index,
                    "status": status,
                }
                if bad and not t.skip:
                    why = t.fails.get(g.index) or t.global_fail
                    res["warnings"] = [{"error_category": 1, "error_id": 1, "warning": why}]
                results.append(res)
            summary = "Skip" if t.skip else ("Fail" if t.fails or t.global_fail else "Pass")
            cats.setdefault(t.category, []).append(
                {"name": t.name, "results": results, "test_summary": {"status": summary}}
            )
        doc = {
            "DCGM Diagnostic": {
                "test_categories": [{"category": c, "tests": ts} for c, ts in cats.items()]
            },
            "metadata": {"Driver Version Detected": driver, "version": daemons.dcgm_version()},
        }
        return jsonfmt.dumps(doc), rc
    out = _table_head(driver, dev_ids.replace(",", ", "))
    current = None
    for t in tests:
        if t.category != current:
            current = t.category
            out.append(_cat_line(current, current == "Deployment"))
        out += _v4_rows(t, gpus)
    out.append("+---------------------------+------------------------------------------------+")
    return "\n".join(out) + "\n", rc


def nvlink(node: Node, argv: list[str]) -> int:
    """`dcgmi nvlink -s` (every GPU's and NVSwitch's link states, U/D/X/_ per slot) and
    `dcgmi nvlink -e -g GPU` (one GPU's error counters), as DCGM's Nvlink.cpp prints them."""
    gpus = model.gpus(node)
    if "-s" in argv or "--link-status" in argv:
        lines = ["+----------------------+", "|  NvLink Link Status  |", "+----------------------+"]
        lines.append("GPUs:")
        for g in gpus:
            if g.lost:
                continue  # DCGM does not list a GPU it lost
            slots = ["U" if up else "D" for up in g.links]
            slots += ["_"] * (NVLINK_SLOTS - len(slots))
            lines += [f"    gpuId {g.index}:", "        " + " ".join(slots)]
        lines.append("NvSwitches:")
        switches = int(model.hw(node).get("nvlink", {}).get("nvswitch_count", 0) or 0)
        if not switches:
            lines.append("    No NvSwitches found.")
        for i in range(switches):
            lines += [f"    physicalId {i}:", "        " + " ".join(["U"] * 64)]
        lines += ["", "Key: Up=U, Down=D, Disabled=X, Not Supported=_"]
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    if "-e" in argv or "--errors" in argv:
        gid = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-g", "--gpuid")), "0")
        g = next((x for x in gpus if str(x.index) == gid), None)
        if g is None or g.lost:
            sys.stdout.write("Error: Unable to retrieve latest value for nvlink error counts.\n")
            return 255
        sep = "+" + "-" * 32 + "+" + "-" * 50 + "+"
        lines = [sep, f"| {'NVLINK Error Counts':<81} |", f"| {'GPU ' + gid:<81} |"]
        lines.append("+" + "=" * 32 + "+" + "=" * 50 + "+")
        for i, up in enumerate(g.links):
            # a link that went down leaves CRC/replay/recovery counts behind (as nvidia-smi's)
            flit, data, replay, recovery = (0, 0, 0, 0) if up else (57, 0, 12, 3)
            for j, (name, v) in enumerate(
                (("CRC FLIT Error", flit), ("CRC Data Error", data),
                 ("Replay Error", replay), ("Recovery Error", recovery))
            ):  # fmt: skip
                left = f"Link {i}" if j == 0 else ""
                lines.append(f"| {left:<30} | {name + ' => ' + str(v):<48} |")
            lines.append(sep)
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    sys.stdout.write("Error: use dcgmi nvlink -s | -e -g GPU\n")
    return 255


NVLINK_SLOTS = 18  # DCGM_NVLINK_MAX_LINKS_PER_GPU


def main(argv: list[str]) -> int:
    node = state.load()
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(
            "usage: dcgmi diag -r <1-4> [-j] | dcgmi nvlink -s | -e -g GPU | dcgmi discovery -l\n"
        )
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
    if argv[0] == "nvlink":
        return nvlink(node, argv[1:])
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
