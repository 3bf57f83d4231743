"""Bandwidth probes: which ones a node runs at a probe level, and the commands.

Levels (``certify(probes=...)`` or the ``gpuboot_probes`` host var):
  none   state checks only (nvidia-smi, kernel log, ibstat, mlnx_qos...): seconds
  quick  + nvbandwidth H2D/D2H/D2D and all_reduce_perf (3 runs each, median), dcgmi diag
         -r 1, one ib_write_bw and one TCP pair run per node pair: well under a minute
  full   + 5 runs, dcgmi diag -r 3, ib_write_bw on every NIC: minutes on real hardware

A probe runs when the host's stack provides its tool: the CUDA probes when the stack has
CUDA (``cuda_toolkit_version``), dcgmi when it has DCGM, ib_write_bw with DOCA-OFED. A tool
the stack promises but the node lacks is an ERROR (exit 127), never a FAIL. A host whose
``nvidia_mig_layout`` enables MIG runs no whole-GPU CUDA probe, and no dcgmi unless each MIG
GPU is one whole-GPU instance: their rules are not applicable there, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuboot.bundle import names
from gpuboot.bundle.names import PRECONDITIONS_FILE
from gpuboot.errors import BadInput

PROBE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Probe:
    """One command a node runs; its stdout becomes the bundle file ``file``."""

    file: str  # evidence file name: the command with spaces as "_" (gpuboot.bundle.names)
    command: str  # may use {procfs} and {sysfs}
    timeout: int = PROBE_TIMEOUT_S


LEVELS = ("none", "quick", "full")
DEFAULT_LEVEL = "quick"
REPEATS = {"none": 0, "quick": 3, "full": 5}
DCGM_LEVEL = {"quick": 1, "full": 3}
LOCK = "/run/gpuboot-probes.lock"
BUSY_TOOLS = ("nvbandwidth", "all_reduce_perf", "ib_write_bw", "dcgmi", "gpuboot-tcpbw")

# figure -> nvbandwidth testcase (copy engine; per direction)
NVBW_TESTS = {
    "nvbandwidth_h2d": "host_to_device_memcpy_ce",
    "nvbandwidth_d2h": "device_to_host_memcpy_ce",
    "nvbandwidth_d2d": "device_to_device_memcpy_read_ce",
}
ALL_REDUCE_SIZE = "8G"  # the busbw plateau on NVLink boards; 20 iterations take seconds


def resolve_level(hostvars: dict[str, Any], override: str | None) -> str:
    level = override or hostvars.get("gpuboot_probes") or DEFAULT_LEVEL
    if level not in LEVELS:
        raise BadInput(
            f"unknown probe level {level!r}",
            where="gpuboot_probes",
            hint=f"use one of: {', '.join(LEVELS)}",
        )
    return str(level)


def mig_gpus(hostvars: dict[str, Any]) -> list[int]:
    """GPU indices the host's ``nvidia_mig_layout`` puts in MIG mode (a non-empty entry)."""
    return [i for i, gis in enumerate(hostvars.get("nvidia_mig_layout") or []) if gis]


def dcgm_refuses_mig(profile: dict[str, Any], hostvars: dict[str, Any]) -> bool:
    """True when the layout splits a GPU. dcgmi diag takes MIG only as one GPU instance with
    one compute instance spanning the whole GPU, and otherwise refuses the whole run, MIG-off
    GPUs included: "GPU N's MIG configuration is incompatible with the diagnostic because it
    prevents access to the entire GPU" (a DCGM maintainer on DCGM's issue tracker, and
    the same refusal with `-i` on a MIG-off GPU). NVIDIA's DCGM docs say no more than
    the 3.1.6 release note: a warning for MIG mode without MIG devices."""
    mig = profile["hardware"].get("mig", {})
    sizes = {p["name"]: int(p["size"]) for p in mig.get("profiles", [])}
    whole = max(sizes.values(), default=0)
    layout = hostvars.get("nvidia_mig_layout") or []
    return any(gis and (len(gis) != 1 or sizes.get(gis[0]) != whole) for gis in layout)


def node_probes(profile: dict[str, Any], hostvars: dict[str, Any], level: str) -> list[Probe]:
    """The single-node bandwidth probes for this host (run after the pre-conditions)."""
    if level == "none":
        return []
    gpus = int(profile["hardware"]["gpu"]["count"])
    out: list[Probe] = []
    # With MIG on, CUDA sees MIG devices instead of boards: nvbandwidth and all_reduce_perf
    # would measure slices (or nothing), never the board's bandwidth.
    if hostvars.get("cuda_toolkit_version") and not mig_gpus(hostvars):
        for run in range(1, REPEATS[level] + 1):
            for figure, test in NVBW_TESTS.items():
                if figure == "nvbandwidth_d2d" and gpus < 2:
                    continue
                out.append(
                    Probe(names.nvbandwidth_file(test, run), f"nvbandwidth -j -t {test}", 300)
                )
            if gpus > 1:
                out.append(
                    Probe(
                        names.all_reduce_file(ALL_REDUCE_SIZE, gpus, run),
                        f"all_reduce_perf -b {ALL_REDUCE_SIZE} -e {ALL_REDUCE_SIZE} -g {gpus}",
                        300,
                    )
                )
    if hostvars.get("dcgm_version") and not dcgm_refuses_mig(profile, hostvars):
        n = DCGM_LEVEL[level]
        out.append(Probe(names.dcgmi_diag_file(n), f"dcgmi diag -r {n}", 600 if n < 3 else 3600))
    return out


def precondition_script(q_file: str) -> list[str]:
    """Shell lines that hold the probe lock and record why probes must not run (if so).

    The lock (fd 9) stays held for the rest of the collection script, so two certify runs
    never measure one node at once; a GPU with compute processes is not idle.
    """
    busy = "|".join(BUSY_TOOLS)
    return [
        f": >{PRECONDITIONS_FILE}",
        f"if [ -w {LOCK.rsplit('/', 1)[0]} ]; then L={LOCK}; else L=/tmp/gpuboot-probes.lock; fi",
        'exec 9>"$L"',
        f'flock -n 9 || echo "busy: another probe run holds $L" >>{PRECONDITIONS_FILE}',
        f"p=$(pgrep -x '{busy}' | tr '\\n' ' ')",
        f'[ -z "$p" ] || echo "busy: probe process(es) running: $p" >>{PRECONDITIONS_FILE}',
        f"grep -q 'Process ID' {q_file} 2>/dev/null && "
        f"echo 'busy: compute processes on the GPUs (nvidia-smi -q)' >>{PRECONDITIONS_FILE}",
    ]
