"""MIG: mode changes (-mig, pending until a GPU reset or reboot), GPU reset (-r) and
`nvidia-smi mig` -lgip/-lgi/-lci/-cgi/-cci/-dgi/-dci with the real tables and messages.

MIG mode lives in the persistent state (the GPU keeps it across reboots); GPU and compute
instances live in the volatile state (a reboot or reset loses them, as on real GPUs).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import kmod, model, smi, smi_q, state
from .model import Gpu
from .state import Node

# GPU instance id by (slice count, placement start): the ids A100/H100 hand out.
GI_IDS = {
    8: {0: 0},
    4: {4: 1, 0: 2},
    2: {4: 3, 6: 4, 0: 5, 2: 6},
    1: {4: 7, 5: 8, 6: 9, 0: 11, 1: 12, 2: 13, 3: 14},
}
# default compute instance profile id by GPU-instance compute slices (1c..7c)
CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


def _out(text: str) -> None:
    sys.stdout.write(text)


def _slices(prof: dict[str, Any]) -> int:
    """Compute slices of a profile: the leading digit of "3g.40gb"."""
    return int(str(prof["name"]).split("g", 1)[0])


def profiles(node: Node) -> list[dict[str, Any]]:
    return list(model.hw(node).get("mig", {}).get("profiles", []))


def find_profile(node: Node, ident: str) -> dict[str, Any] | None:
    ident = ident.strip().removeprefix("MIG ").strip()
    for prof in profiles(node):
        if ident == str(prof["id"]) or ident == prof["name"]:
            return prof
    return None


def gis(node: Node, bus: str) -> list[dict[str, Any]]:
    mig: dict[str, Any] = node.vstate.setdefault("mig", {})
    entry: dict[str, Any] = mig.setdefault(bus, {"gis": []})
    result: list[dict[str, Any]] = entry["gis"]
    return result


def _overlaps(start: int, size: int, used: list[tuple[int, int]]) -> bool:
    return any(start < s + z and s < start + size for s, z in used)


def free_placement(node: Node, bus: str, prof: dict[str, Any]) -> int | None:
    used = [(g["start"], g["size"]) for g in gis(node, bus)]
    if prof["name"].endswith("+me") and any(g["name"].endswith("+me") for g in gis(node, bus)):
        return None  # one media-extension instance per GPU
    size = int(prof["size"])
    order = sorted(prof["placements"], key=lambda p: GI_IDS.get(size, {}).get(p, 99 + p))
    for start in order:
        if not _overlaps(start, size, used):
            return int(start)
    return None


def free_count(node: Node, bus: str, prof: dict[str, Any]) -> int:
    """How many more instances of a profile fit beside the existing ones."""
    used = [(g["start"], g["size"]) for g in gis(node, bus)]
    if prof["name"].endswith("+me") and any(g["name"].endswith("+me") for g in gis(node, bus)):
        return 0
    count = 0
    for start in prof["placements"]:
        if not _overlaps(start, int(prof["size"]), used):
            used.append((start, int(prof["size"])))
            count += 1
    return min(count, int(prof["instances"]))


# --- nvidia-smi -mig / -r --------------------------------------------------------------


def _root_ok() -> bool:
    return os.geteuid() == 0 or bool(os.environ.get("GPUEMU_ROOT"))


def set_mode(argv: list[str], ids: str | None) -> int:
    try:
        return _set_mode(argv, ids)
    except smi.Exit as exc:
        return exc.rc


def _set_mode(argv: list[str], ids: str | None) -> int:
    val = smi._opt(argv, "-mig", "--multi-instance-gpu")
    enable = {"1": True, "0": False}.get(val or "")
    if enable is None:
        _out(f'Invalid value "{val}" for MIG mode. Valid values: 0 (disable), 1 (enable).\n')
        return smi.RC_INVALID_ARG
    word = "enable" if enable else "disable"
    with state.transaction() as node:
        smi.driver_version(node)
        gpus = smi.select(model.gpus(node), ids)
        if not _root_ok():
            _out("Unable to " + word + " MIG Mode: Insufficient Permissions\n")
            return smi.RC_NO_PERM
        supported = bool(model.hw(node).get("mig", {}).get("supported"))
        rc = 0
        for g in gpus:
            if g.lost:
                _out(smi_q.lost_message(g) + "\n")
                rc = smi.RC_GPU_LOST
                continue
            if not supported:
                _out(f"Unable to {word} MIG Mode for GPU {g.bus_id}: Not Supported\n")
                rc = 3
                continue
            if not enable and gis(node, g.bus_id):
                _out(f"Unable to disable MIG Mode for GPU {g.bus_id}: In use by another client\n")
                rc = smi.RC_INVALID_ARG
                continue
            mode = node.pstate.setdefault("mig_mode", {}).setdefault(
                g.bus_id, {"current": g.mig_current, "pending": g.mig_pending}
            )
            mode["pending"] = enable
            if mode.get("current", False) == enable:
                _out(f"{'Enabled' if enable else 'Disabled'} MIG Mode for GPU {g.bus_id}\n")
            else:
                # The change waits for a GPU reset or a reboot.
                _out(
                    f"Warning: MIG mode is in pending {word} state for GPU {g.bus_id}:Not "
                    f"Supported\nReboot the system or try nvidia-smi --gpu-reset to make MIG "
                    f"mode effective on GPU {g.bus_id}\n"
                )
        _out("All done.\n")
        return rc


def reset(ids: str | None) -> int:
    try:
        return _reset(ids)
    except smi.Exit as exc:
        return exc.rc


def _reset(ids: str | None) -> int:
    with state.transaction() as node:
        smi.driver_version(node)
        gpus = smi.select(model.gpus(node), ids)
        if not _root_ok():
            _out("Unable to reset GPU: Insufficient Permissions\n")
            return smi.RC_NO_PERM
        busy = [g for g in gpus if not g.lost and in_use(node, g)]
        if busy:  # nothing is reset while a client holds a GPU (NVIDIA/gpu-operator#118)
            _out(
                "The following GPUs could not be reset:\n"
                + "".join(f"  GPU {g.bus_id}: In use by another client\n" for g in busy)
                + f"\n{len(busy)} device is currently being used by one or more other "
                "processes (e.g., Fabric Manager, CUDA application, graphics application such "
                "as an X server, or a monitoring application such as another instance of "
                "nvidia-smi). Please first kill all processes using this device and all "
                "compute applications running in the system.\n"
            )
            return RC_IN_USE
        rc = 0
        for g in gpus:
            if g.lost:
                _out(f"Unable to reset GPU {g.bus_id}: Unknown Error\n")
                rc = smi.RC_GPU_LOST
                continue
            reset_gpu(node, g)
            _out(f"GPU {g.bus_id} was successfully reset.\n")
        _out("All done.\n")
        return rc


RC_IN_USE = 255
# Daemons that keep every GPU open while they run (they must stop for a reset).
GPU_CLIENTS = ("persistenced", "hostengine")


def in_use(node: Node, g: Gpu) -> bool:
    """A compute process on the GPU, or a daemon holding all of them open."""
    if any(int(f["args"][0]) == g.slot for f in model.faults_of(node, "gpu-process")):
        return True
    return any(kmod.pid_alive(node.vstate.get(f"{d}_pid")) for d in GPU_CLIENTS)


def reset_gpu(node: Node, g: Gpu) -> None:
    """What a GPU reset does to the model: pending MIG mode applies, instances vanish,
    a pending row remap is carried out, and the GPU's Xid state of this boot clears (an
    Xid injected to survive reboots is a persistent fault: it stays)."""
    mode = node.pstate.setdefault("mig_mode", {}).get(g.bus_id)
    if mode is not None:
        mode["current"] = mode.get("pending", mode.get("current", False))
    node.vstate.setdefault("mig", {}).pop(g.bus_id, None)
    for store in (node.pstate, node.vstate):
        store["faults"] = [
            f
            for f in store.get("faults", [])
            if not (f["kind"] == "remap-pending" and int(f["args"][0]) == g.slot)
        ]
    node.vstate["faults"] = [
        f
        for f in node.vstate.get("faults", [])
        if not (f["kind"] == "xid" and int(f["args"][1]) == g.slot)
    ]


# --- nvidia-smi mig ---------------------------------------------------------------------


def main(argv: list[str]) -> int:
    try:
        return _main(argv)
    except smi.Exit as exc:
        return exc.rc


def _opt(argv: list[str], *names: str) -> str | None:
    return smi._opt(argv, *names)


def _main(argv: list[str]) -> int:
    mutate = any(
        a in argv
        for a in (
            "-cgi",
            "--create-gpu-instance",
            "-cci",
            "--create-compute-instance",
            "-dgi",
            "--destroy-gpu-instance",
            "-dci",
            "--destroy-compute-instance",
        )
    )
    if mutate:
        with state.transaction() as node:
            return _run(node, argv)
    return _run(state.load(), argv)


def _run(node: Node, argv: list[str]) -> int:
    smi.driver_version(node)
    gpus = smi.select(model.gpus(node), _opt(argv, "-i", "--id"))
    migs = [g for g in gpus if g.mig_current and not g.lost]
    if not migs:
        _out("No MIG-enabled devices found.\n")
        return smi.RC_QUERY_FAILED
    if "-lgip" in argv or "--list-gpu-instance-profiles" in argv:
        return list_profiles(node, migs)
    if "-lgi" in argv or "--list-gpu-instances" in argv:
        return list_gis(node, migs)
    if "-lci" in argv or "--list-compute-instances" in argv:
        return list_cis(node, migs, _opt(argv, "-gi", "--gpu-instance-id"))
    if not _root_ok():
        _out("Insufficient Permissions\n")
        return smi.RC_NO_PERM
    cgi = _opt(argv, "-cgi", "--create-gpu-instance")
    if cgi is not None:
        return create_gis(node, migs, cgi, "-C" in argv or "--default-compute-instance" in argv)
    if "-cci" in argv or "--create-compute-instance" in argv:
        return create_cis(node, migs, _opt(argv, "-gi", "--gpu-instance-id"))
    if "-dci" in argv or "--destroy-compute-instance" in argv:
        return destroy_cis(
            node,
            migs,
            _opt(argv, "-gi", "--gpu-instance-id"),
            _opt(argv, "-ci", "--compute-instance-id"),
        )
    if "-dgi" in argv or "--destroy-gpu-instance" in argv:
        return destroy_gis(node, migs, _opt(argv, "-gi", "--gpu-instance-id"))
    _out("Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help.\n")
    return smi.RC_INVALID_ARG


LGIP_HEAD = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
"""
LGIP_SEP = "+" + "-" * 77 + "+\n"


def list_profiles(node: Node, gpus: list[Gpu]) -> int:
    rows = []
    for g in gpus:
        for p in profiles(node):
            inst = f"{free_count(node, g.bus_id, p)}/{p['instances']}"
            rows.append(
                f"|{g.index:>4}  {'MIG ' + p['name']:<16}{p['id']:>4}{inst:>8}        "
                f"{float(p['memory_gib']):<11.2f}{'No':<2}{p['sm']:>7}{p['dec']:>6}"
                f"{p['enc']:>6}   |\n"
                f"|{'':55}{p['ce']:>7}{p['jpeg']:>6}{p['ofa']:>6}   |\n"
            )
    _out(LGIP_HEAD + LGIP_SEP.join(rows) + LGIP_SEP)
    return 0


LGI_HEAD = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
"""
LGI_SEP = "+" + "-" * 55 + "+\n"


def list_gis(node: Node, gpus: list[Gpu]) -> int:
    rows = []
    for g in gpus:
        for gi in sorted(gis(node, g.bus_id), key=lambda x: x["id"]):
            place = f"{gi['start']}:{gi['size']}"
            rows.append(
                f"|{g.index:>4}  {'MIG ' + gi['name']:<16}{gi['profile']:>6}"
                f"{gi['id']:>9}{place:>13}     |\n"
            )
    if not rows:
        _out("No GPU instances found: Not Found\n")
        return smi.RC_QUERY_FAILED
    _out(LGI_HEAD + LGI_SEP.join(rows) + LGI_SEP)
    return 0


LCI_HEAD = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
"""
LCI_SEP = "+" + "-" * 68 + "+\n"


def list_cis(node: Node, gpus: list[Gpu], gi_filter: str | None) -> int:
    rows = []
    wanted = {int(x) for x in gi_filter.split(",")} if gi_filter else None
    for g in gpus:
        for gi in sorted(gis(node, g.bus_id), key=lambda x: x["id"]):
            if wanted is not None and gi["id"] not in wanted:
                continue
            for ci in gi.get("cis", []):
                place = f"{ci['start']}:{ci['size']}"
                rows.append(
                    f"|{g.index:>4}{gi['id']:>7}       {'MIG ' + gi['name']:<16}"
                    f"{ci['profile']:>6}{ci['id']:>10}{place:>13}     |\n"
                )
    if not rows:
        _out("No compute instances found: Not Found\n")
        return smi.RC_QUERY_FAILED
    _out(LCI_HEAD + LCI_SEP.join(rows) + LCI_SEP)
    return 0


def _new_ci(gi: dict[str, Any]) -> dict[str, Any]:
    slices = int(gi["slices"])
    ci = {"id": 0, "profile": CI_PROFILE.get(slices, 0), "start": 0, "size": slices}
    gi.setdefault("cis", []).append(ci)
    return ci


def create_gis(node: Node, gpus: list[Gpu], spec: str, with_ci: bool) -> int:
    rc = 0
    for g in gpus:
        for ident in [s for s in spec.split(",") if s.strip()]:
            prof = find_profile(node, ident)
            if prof is None:
                _out(
                    f"Unable to create a GPU instance on GPU {g.index:>2} using profile "
                    f"{ident.strip()}: Invalid Argument\nFailed to create GPU instances: "
                    "Invalid Argument\n"
                )
                return smi.RC_INVALID_ARG
            start = free_placement(node, g.bus_id, prof)
            if start is None:
                _out(
                    f"Unable to create a GPU instance on GPU {g.index:>2} using profile "
                    f"{prof['id']}: Insufficient Resources\nFailed to create GPU instances: "
                    "Insufficient Resources\n"
                )
                return smi.RC_INVALID_ARG
            size = int(prof["size"])
            gi_id = GI_IDS.get(size, {}).get(start, 15 + start)
            gi = {
                "id": gi_id,
                "profile": int(prof["id"]),
                "name": prof["name"],
                "start": start,
                "size": size,
                "slices": _slices(prof),
                "cis": [],
            }
            gis(node, g.bus_id).append(gi)
            _out(
                f"Successfully created GPU instance ID {gi_id:>2} on GPU {g.index:>2} using "
                f"profile MIG {prof['name']} (ID {prof['id']:>2})\n"
            )
            if with_ci:
                ci = _new_ci(gi)
                _out(
                    f"Successfully created compute instance ID {ci['id']:>2} on GPU "
                    f"{g.index:>2} GPU instance ID {gi_id:>2} using profile MIG "
                    f"{prof['name']} (ID {ci['profile']:>2})\n"
                )
    return rc


def _select_gis(node: Node, g: Gpu, gi_filter: str | None) -> list[dict[str, Any]]:
    wanted = {int(x) for x in gi_filter.split(",")} if gi_filter else None
    return [
        gi
        for gi in sorted(gis(node, g.bus_id), key=lambda x: x["id"])
        if wanted is None or gi["id"] in wanted
    ]


def create_cis(node: Node, gpus: list[Gpu], gi_filter: str | None) -> int:
    done = False
    for g in gpus:
        for gi in _select_gis(node, g, gi_filter):
            if gi.get("cis"):
                continue
            ci = _new_ci(gi)
            done = True
            _out(
                f"Successfully created compute instance ID {ci['id']:>2} on GPU {g.index:>2} "
                f"GPU instance ID {gi['id']:>2} using profile MIG {gi['name']} "
                f"(ID {ci['profile']:>2})\n"
            )
    if not done:
        _out("Failed to create compute instances: Insufficient Resources\n")
        return smi.RC_INVALID_ARG
    return 0


def destroy_cis(node: Node, gpus: list[Gpu], gi_filter: str | None, ci_filter: str | None) -> int:
    wanted = {int(x) for x in ci_filter.split(",")} if ci_filter else None
    done = False
    for g in gpus:
        for gi in _select_gis(node, g, gi_filter):
            keep = []
            for ci in gi.get("cis", []):
                if wanted is None or ci["id"] in wanted:
                    done = True
                    _out(
                        f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU "
                        f"{g.index:>2} GPU instance ID {gi['id']:>2}\n"
                    )
                else:
                    keep.append(ci)
            gi["cis"] = keep
    if not done:
        _out("No compute instances found: Not Found\n")
        return smi.RC_QUERY_FAILED
    return 0


def destroy_gis(node: Node, gpus: list[Gpu], gi_filter: str | None) -> int:
    rc = 0
    done = False
    for g in gpus:
        for gi in _select_gis(node, g, gi_filter):
            if gi.get("cis"):
                _out(
                    f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {g.index:>2}: "
                    "In use by another client\n"
                )
                rc = smi.RC_INVALID_ARG
                continue
            gis(node, g.bus_id).remove(gi)
            done = True
            _out(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {g.index:>2}\n")
    if not done and rc == 0:
        _out("No GPU instances found: Not Found\n")
        return smi.RC_QUERY_FAILED
    return rc


# --- what other reports show about MIG devices -------------------------------------------


def mig_devices(node: Node, g: Gpu) -> list[dict[str, Any]]:
    """MIG devices (one per compute instance) in the order nvidia-smi numbers them."""
    devs = []
    for gi in sorted(gis(node, g.bus_id), key=lambda x: x["id"]):
        prof = find_profile(node, str(gi["profile"])) or {}
        for ci in gi.get("cis", []):
            devs.append({"gi": gi, "ci": ci, "prof": prof})
    return devs


def mig_uuid(g: Gpu, gi_id: int, ci_id: int) -> str:
    h = g.uuid[4:].replace("-", "")
    mixed = f"{h[:6]}{gi_id:02x}{ci_id:02x}{h[10:]}"
    return f"MIG-{mixed[:8]}-{mixed[8:12]}-{mixed[12:16]}-{mixed[16:20]}-{mixed[20:32]}"


def q_entries(node: Node, g: Gpu) -> list[smi_q.E]:
    """The "MIG Device" blocks of `nvidia-smi -q` (text and XML)."""
    v, s = smi_q.v, smi_q.s
    out = []
    for i, d in enumerate(mig_devices(node, g)):
        prof, gi, ci = d["prof"], d["gi"], d["ci"]
        mem = int(float(prof.get("memory_gib", 0)) * 1024)
        out.append(
            s(
                "MIG Device",
                "mig_device",
                v("Index", "index", i),
                v("GPU Instance ID", "gpu_instance_id", gi["id"]),
                v("Compute Instance ID", "compute_instance_id", ci["id"]),
                s(
                    "Device Attributes",
                    "device_attributes",
                    s(
                        "Shared",
                        "shared",
                        v("Multiprocessor count", "multiprocessor_count", prof.get("sm", 0)),
                        v("Copy Engine count", "copy_engine_count", prof.get("ce", 0)),
                        v("Encoder count", "encoder_count", prof.get("enc", 0)),
                        v("Decoder count", "decoder_count", prof.get("dec", 0)),
                        v("OFA count", "ofa_count", prof.get("ofa", 0)),
                        v("JPG count", "jpg_count", prof.get("jpeg", 0)),
                    ),
                ),
                s(
                    "ECC Errors",
                    "ecc_error_count",
                    s(
                        "Volatile",
                        "volatile_count",
                        v("SRAM Uncorrectable", "sram_uncorrectable", 0),
                    ),
                ),
                s(
                    "Shared FB Memory Usage",
                    "fb_memory_usage",
                    v("Total", "total", f"{mem} MiB"),
                    v("Reserved", "reserved", "0 MiB"),
                    v("Used", "used", "0 MiB"),
                    v("Free", "free", f"{mem} MiB"),
                ),
                s(
                    "Shared BAR1 Memory",
                    "bar1_memory_usage",
                    v("Total", "total", f"{mem * 5 // 6} MiB"),
                    v("Used", "used", "0 MiB"),
                    v("Free", "free", f"{mem * 5 // 6} MiB"),
                ),
            )
        )
    return out


def list_lines(node: Node, g: Gpu) -> list[str]:
    """`nvidia-smi -L` lines under a MIG-enabled GPU."""
    return [
        f"  MIG {d['gi']['name']:<11} Device {i:>2}: "
        f"(UUID: {mig_uuid(g, d['gi']['id'], d['ci']['id'])})"
        for i, d in enumerate(mig_devices(node, g))
    ]
