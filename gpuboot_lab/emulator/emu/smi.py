"""nvidia-smi: driver checks first (exit codes of the real tool), then the subcommand."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from . import model, smi_fields, smi_q, state
from .model import Gpu
from .smi_fields import Ctx
from .state import Node

# nvidia-smi return codes (nvidia-smi(1), "RETURN VALUE")
RC_INVALID_ARG = 2
RC_NO_PERM = 4
RC_QUERY_FAILED = 6
RC_NO_DRIVER = 9
RC_NO_NVML = 12
RC_GPU_LOST = 15
RC_MISMATCH = 18

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)
NO_NVML = (
    "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure "
    "that the NVIDIA Display Driver is properly installed and present in your system.\n"
    "Please also try adding directory that contains libnvidia-ml.so to your system "
    "PATH.\n"
)


def out(text: str) -> None:
    sys.stdout.write(text)


class Exit(Exception):
    def __init__(self, rc: int):
        super().__init__(rc)
        self.rc = rc


def driver_version(node: Node) -> str:
    """NVML's view: refuse the way the real tool does when the driver is unusable."""
    nvml = model.read_userspace("nvml")
    if nvml is None:
        out(NO_NVML)
        raise Exit(RC_NO_NVML)
    kver = model.module_version(node, "nvidia")
    if kver is None:
        out(NO_DRIVER)
        raise Exit(RC_NO_DRIVER)
    if kver != nvml:
        out(
            f"Failed to initialize NVML: Driver/library version mismatch\n"
            f"NVML library version: {nvml}\n"
        )
        raise Exit(RC_MISMATCH)
    return kver


def fabric_state(node: Node) -> tuple[str, str]:
    nvl = model.hw(node).get("nvlink", {})
    if not int(nvl.get("nvswitch_count", 0) or 0):
        return ("N/A", "N/A")
    from . import fabric

    return fabric.gpu_fabric_state(node)


def ctx_for(node: Node, driver: str, gpus: list[Gpu]) -> Ctx:
    hw = model.hw(node)
    return Ctx(
        driver=driver,
        count=len(gpus),
        fabric=fabric_state(node),
        mig_supported=bool(hw.get("mig", {}).get("supported")),
        has_nvswitch=bool(int(hw.get("nvlink", {}).get("nvswitch_count", 0) or 0)),
        processes=processes(node),
    )


def processes(node: Node) -> dict[int, list[tuple[str, str, int]]]:
    """GPU slot -> its compute processes (fault gpu-process: slot, name, MiB, pid)."""
    out: dict[int, list[tuple[str, str, int]]] = {}
    for f in model.faults_of(node, "gpu-process"):
        slot, name, mib, pid = f["args"]
        out.setdefault(int(slot), []).append((pid, name, int(mib)))
    return out


def select(gpus: list[Gpu], ids: str | None) -> list[Gpu]:
    """-i: indices, PCI bus ids or UUIDs, comma separated."""
    if ids is None:
        return gpus
    chosen: list[Gpu] = []
    for ident in ids.split(","):
        ident = ident.strip()
        for g in gpus:
            if ident == str(g.index) or ident.upper() in (g.bus_id, g.bus4) or ident == g.uuid:
                chosen.append(g)
                break
        else:
            out("No devices were found\n")
            raise Exit(RC_QUERY_FAILED)
    return chosen


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except Exit as exc:
        return exc.rc


def _opt(argv: list[str], *names: str) -> str | None:
    """Value of -x VALUE / --xx=VALUE / --xx VALUE."""
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if name.startswith("--") and arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        out(
            "NVIDIA System Management Interface -- v(emulated)\n\n"
            "Supported in this lab: -L, -q [-x], --query-gpu=... --format=csv,\n"
            "--query-compute-apps=... --format=csv, -pm, -r, -mig,\n"
            "nvlink -s|-e, topo -m, mig -lgip|-lgi|-lci|-cgi|-dgi|-cci|-dci\n"
        )
        return 0
    if argv and argv[0] in ("--version", "-v"):
        node = state.load()
        drv = driver_version(node)
        out(
            f"NVIDIA-SMI version  : {drv}\nNVML version        : {drv}\n"
            f"DRIVER version      : {drv}\nCUDA Version        : {model.cuda_version(drv)}\n"
        )
        return 0
    sub = argv[0] if argv and not argv[0].startswith("-") else None
    if sub is not None:
        return subcommand(sub, argv[1:])
    ids = _opt(argv, "-i", "--id")
    if "-pm" in argv or any(a.startswith("--persistence-mode") for a in argv):
        return persistence(argv, ids)
    if "-mig" in argv or any(a.startswith("--multi-instance-gpu") for a in argv):
        from . import mig

        return mig.set_mode(argv, ids)
    if "-r" in argv or "--gpu-reset" in argv:
        from . import mig

        return mig.reset(ids)
    node = state.load()
    drv = driver_version(node)
    all_gpus = model.gpus(node)
    if not all_gpus:
        out("No devices were found\n")
        return RC_QUERY_FAILED
    gpus = select(all_gpus, ids)
    ctx = ctx_for(node, drv, all_gpus)
    apps = _opt(argv, "--query-compute-apps")
    if apps is not None:
        return query_apps(node, gpus, apps, _opt(argv, "--format") or "")
    query = _opt(argv, "--query-gpu")
    if query is not None:
        fmt = _opt(argv, "--format") or ""
        return query_gpu(gpus, ctx, query, fmt)
    from . import mig

    if "-L" in argv or "--list-gpus" in argv:
        for g in gpus:
            if g.lost:
                out(smi_q.lost_message(g) + "\n")
            else:
                out(f"GPU {g.index}: {g.name} (UUID: {g.uuid})\n")
                for line in mig.list_lines(node, g) if g.mig_current else []:
                    out(line + "\n")
        return RC_GPU_LOST if any(g.lost for g in gpus) else 0
    if "-q" in argv or "--query" in argv:
        devices = {g.bus_id: mig.q_entries(node, g) for g in gpus if g.mig_current}
        if "-x" in argv or "--xml-format" in argv:
            from . import smi_xml

            text, rc = smi_xml.xml_report(gpus, ctx, drv, devices)
        else:
            display = _opt(argv, "-d", "--display")
            bad = [d for d in (display or "").split(",") if d and d.upper() not in smi_q.DISPLAY]
            if bad:
                out(f'"{bad[0]}" is not a valid display type.\n')
                return RC_INVALID_ARG
            text, rc = smi_q.text_report(gpus, ctx, drv, devices, display)
        out(text)
        return rc
    if argv:
        out("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
        return RC_INVALID_ARG
    return summary(node, gpus, drv)


def query_gpu(gpus: list[Gpu], ctx: Ctx, query: str, fmt: str) -> int:
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts:
        out('"--format=" must be specified and contain "csv"\n') if not fmt else out(
            f'"{fmt}" is not a valid format.\n'
        )
        return RC_INVALID_ARG
    names = [n.strip() for n in query.split(",") if n.strip()]
    for name in names:
        if smi_fields.resolve(name) is None:
            out(f'Field "{name}" is not a valid field to query.\n\n')
            return RC_INVALID_ARG
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(smi_fields.header(n) for n in names))
    rc = 0
    for g in gpus:
        if g.lost:
            lines.append(smi_q.lost_message(g))
            rc = RC_GPU_LOST
            continue
        lines.append(", ".join(smi_fields.value(n, g, ctx, "nounits" not in opts) for n in names))
    out("\n".join(lines) + "\n")
    return rc


# --query-compute-apps fields: header, value of (gpu, (pid, name, MiB), with units)
APP_FIELDS: dict[str, tuple[str, Any]] = {
    "pid": ("pid", lambda g, p, _u: str(p[0])),
    "process_name": ("process_name", lambda g, p, _u: p[1]),
    "name": ("process_name", lambda g, p, _u: p[1]),
    "gpu_bus_id": ("gpu_bus_id", lambda g, p, _u: g.bus_id),
    "gpu_uuid": ("gpu_uuid", lambda g, p, _u: g.uuid),
    "used_memory": ("used_gpu_memory [MiB]", lambda g, p, u: f"{p[2]} MiB" if u else str(p[2])),
    "used_gpu_memory": (
        "used_gpu_memory [MiB]",
        lambda g, p, u: f"{p[2]} MiB" if u else str(p[2]),
    ),
}


def query_apps(node: Node, gpus: list[Gpu], query: str, fmt: str) -> int:
    """The compute processes on the selected GPUs (gpu-process faults), one per line."""
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts:
        out('"--format=" must be specified and contain "csv"\n')
        return RC_INVALID_ARG
    names = [n.strip() for n in query.split(",") if n.strip()]
    for name in names:
        if name not in APP_FIELDS:
            out(f'Field "{name}" is not a valid field to query.\n\n')
            return RC_INVALID_ARG
    lines = [] if "noheader" in opts else [", ".join(APP_FIELDS[n][0] for n in names)]
    running = processes(node)
    for g in gpus:
        for proc in running.get(g.slot, []):
            units = "nounits" not in opts
            lines.append(", ".join(APP_FIELDS[n][1](g, proc, units) for n in names))
    out("".join(line + "\n" for line in lines))
    return 0


def persistence(argv: list[str], ids: str | None) -> int:
    val = _opt(argv, "-pm", "--persistence-mode")
    enable = {"1": True, "ENABLED": True, "0": False, "DISABLED": False}.get((val or "").upper())
    if enable is None:
        out(
            f'Invalid value "{val}" for persistence mode. Valid values: 0/DISABLED, 1/ENABLED.\n'
            if val
            else "Option requires an argument -- 'pm'\n"
        )
        return RC_INVALID_ARG
    with state.transaction() as node:
        driver_version(node)
        gpus = select(model.gpus(node), ids)
        if os.geteuid() != 0 and not os.environ.get("GPUEMU_ROOT"):
            for g in gpus:
                out(
                    f"Unable to set persistence mode for GPU {g.bus_id}: Insufficient Permissions\n"
                )
            out("Terminating early due to previous errors.\n")
            return RC_NO_PERM
        pers = node.vstate.setdefault("persistence", {})
        rc = 0
        for g in gpus:
            if g.lost:
                out(smi_q.lost_message(g) + "\n")
                rc = RC_GPU_LOST
                continue
            word = "Enabled" if enable else "Disabled"
            if bool(pers.get(g.bus_id)) == enable:
                out(f"Persistence mode is already {word} for GPU {g.bus_id}.\n")
            else:
                pers[g.bus_id] = enable
                out(f"{word} persistence mode for GPU {g.bus_id}.\n")
        out("All done.\n")
        return rc


def _row(*cols: str) -> str:
    return "|" + "|".join(cols) + "|"


def summary(node: Node, gpus: list[Gpu], drv: str) -> int:
    """The default table, 535-series layout (87 columns between the outer bars)."""
    rc = 0
    sep = "+" + "-" * 41 + "+" + "-" * 22 + "+" + "-" * 22 + "+"
    head = f" NVIDIA-SMI {drv:<23}Driver Version: {drv:<13}CUDA Version: {model.cuda_version(drv)}"
    lines = [
        time.strftime("%a %b %e %H:%M:%S %Y       "),
        "+" + "-" * 87 + "+",
        _row(f"{head:<87}"),
        "|" + "-" * 41 + "+" + "-" * 22 + "+" + "-" * 22 + "+",
        _row(
            " GPU  Name                 Persistence-M ",
            " Bus-Id        Disp.A ",
            " Volatile Uncorr. ECC ",
        ),
        _row(
            " Fan  Temp   Perf          Pwr:Usage/Cap ",
            "         Memory-Usage ",
            " GPU-Util  Compute M. ",
        ),
        _row(" " * 41, " " * 22, "               MIG M. "),
        "|" + "=" * 41 + "+" + "=" * 22 + "+" + "=" * 22 + "|",
    ]
    pre: list[str] = []
    mig_ok = bool(model.hw(node).get("mig", {}).get("supported"))
    erring = {int(f["args"][0]) for f in model.faults_of(node, "gpu-err")}
    for g in gpus:
        if g.lost and g.slot in erring:
            lines += [*err_rows(g), sep]
            continue
        if g.lost:
            pre.append(smi_q.lost_message(g))
            rc = RC_GPU_LOST
            continue
        name = g.name if len(g.name) <= 29 else g.name[:26] + "..."
        pm = "On" if g.persistence else "Off"
        mig = ("Enabled" if g.mig_current else "Disabled") if mig_ok else "N/A"
        power = f"{int(g.power)}W / {int(g.hw['power_limit_w'])}W"
        memory = f"{0}MiB / {int(g.hw['memory_mib'])}MiB"
        lines.append(
            _row(
                f"{g.index:>4}  {name:<29}{pm:>4}  ",
                f" {g.bus_id} Off ",
                f"{g.dram_uncorr_vol:>21} ",
            )
        )
        lines.append(
            _row(
                f" N/A  {g.temp:>3}C    P0{power:>24} ",
                f"{memory:>21} ",
                f"{'0%':>8}{'Default':>13} ",
            )
        )
        lines.append(_row(" " * 41, " " * 22, f"{mig:>21} "))
        lines.append(sep)
    lines += [
        " " * 89,
        "+" + "-" * 87 + "+",
        _row(f"{' Processes:':<87}"),
        _row(f"{'  GPU   GI   CI        PID   Type   Process name':<73}GPU Memory "),
        _row(f"{'        ID   ID':<73}Usage      "),
        "|" + "=" * 87 + "|",
        _row(f"{'  No running processes found':<87}"),
        "+" + "-" * 87 + "+",
    ]
    out("\n".join(pre + lines) + "\n")
    return rc


def err_rows(g: Gpu) -> list[str]:
    """A GPU the driver still lists but NVML lost: every field read from the GPU is "ERR!"
    (name, ECC, fan, temperature, perf, power, utilization, MIG); memory comes from the
    driver's own books (NVIDIA/gpu-operator issue 559 shows this row)."""
    pm = "On" if g.persistence else "Off"
    memory = f"0MiB / {int(g.hw['memory_mib'])}MiB"
    return [
        _row(f"{g.index:>4}  {'ERR!':<29}{pm:>4}  ", f" {g.bus_id} Off ", f"{'ERR!':>21} "),
        _row(
            f"ERR!  ERR!  ERR!{'ERR! / ERR!':>24} ",
            f"{memory:>21} ",
            f"{'ERR!':>8}{'Default':>13} ",
        ),
        _row(" " * 41, " " * 22, f"{'ERR!':>21} "),
    ]


def subcommand(sub: str, argv: list[str]) -> int:
    if sub == "nvlink":
        from . import nvlink

        return nvlink.main(argv)
    if sub == "topo":
        from . import topo

        return topo.main(argv)
    if sub == "mig":
        from . import mig

        return mig.main(argv)
    out("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")
    return RC_INVALID_ARG
