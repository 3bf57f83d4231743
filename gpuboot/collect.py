"""Evidence collection: every probe of a node in one SSH round trip.

The node runs one shell script that stores each probe's stdout, stderr and exit
code in a temp dir and sends it back as a base64 tar, so stdout reaches the bundle
byte for byte (DESIGN.md: each probe file holds the unmodified stdout).
"""

from __future__ import annotations

import base64
import io
import json
import shlex
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot.evidence.packages import DPKG_QUERY

# Fields of the one --query-gpu call; the file name records the command, the fields
# are kept in meta.json.
QUERY_FIELDS = (
    "index,name,uuid,serial,pci.bus_id,driver_version,vbios_version,persistence_mode,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
    "ecc.mode.current,ecc.errors.uncorrected.volatile.total,mig.mode.current,mig.mode.pending,"
    "temperature.gpu"
)
PROBE_TIMEOUT_S = 120
MIG_LGI_FILE = "nvidia-smi_mig_-lgi.txt"


@dataclass(frozen=True)
class Probe:
    file: str  # evidence file name: the command with spaces as "_"
    command: str  # may use {procfs} and {sysfs}
    timeout: int = PROBE_TIMEOUT_S


PROBES: tuple[Probe, ...] = (
    Probe(
        "nvidia-smi_--query-gpu_--format=csv.csv",
        f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv",
    ),
    Probe("nvidia-smi_-q.txt", "nvidia-smi -q"),
    Probe("dmesg.txt", "dmesg"),
    Probe("lsmod.txt", "lsmod"),
    Probe("proc_driver_nvidia_version.txt", "cat {procfs}/driver/nvidia/version"),
    Probe("dpkg-query_-W.txt", DPKG_QUERY),
    Probe("apt-mark_showhold.txt", "apt-mark showhold"),
    Probe("apt-config_dump_Unattended-Upgrade.txt", "apt-config dump Unattended-Upgrade"),
    Probe("reboot-required.txt", "cat /var/run/reboot-required* 2>/dev/null; true"),
)


@dataclass(frozen=True)
class ProbeOutput:
    stdout: str
    stderr: str
    rc: int


Evidence = dict[str, ProbeOutput]


def ecn_file(netdev: str) -> str:
    return f"sys_class_net_{netdev}_ecn_enable.txt"


def state_probes(
    profile: dict[str, Any] | None, hostvars: dict[str, Any] | None = None
) -> tuple[Probe, ...]:
    """PROBES plus what the SKU's hardware calls for (NVLink, NICs and their QoS, fabric
    manager) and the GPU instances when the host has a MIG layout: cheap reads, collected at
    every probe level."""
    if profile is None:
        return PROBES
    hw = profile["hardware"]
    extra: list[Probe] = []
    if (hostvars or {}).get("nvidia_mig_layout") is not None:
        # exits non-zero with "No MIG-enabled devices found." or "No GPU instances found":
        # facts MIG-001 judges, not probe failures
        extra.append(Probe(MIG_LGI_FILE, "nvidia-smi mig -lgi"))
    if int(hw["nvlink"]["links_per_gpu"]):
        extra += [
            Probe("nvidia-smi_nvlink_-s.txt", "nvidia-smi nvlink -s"),
            Probe("nvidia-smi_nvlink_-e.txt", "nvidia-smi nvlink -e"),
        ]
    if int(hw["nvlink"].get("nvswitch_count", 0) or 0):
        extra.append(
            Probe(
                "systemctl_is-active_nvidia-fabricmanager.txt",
                "systemctl is-active nvidia-fabricmanager",
            )
        )
    if hw["nics"]:
        extra.append(Probe("ibstat.txt", "ibstat"))
        for nic in hw["nics"]:
            if nic.get("link_layer") == "Ethernet":
                dev = nic["netdev"]
                extra.append(Probe(f"mlnx_qos_-i_{dev}.txt", f"mlnx_qos -i {shlex.quote(dev)}"))
                ecn = shlex.quote(f"{{sysfs}}/class/net/{dev}/ecn")
                extra.append(
                    Probe(ecn_file(dev), f"grep -H . {ecn}/roce_np/enable/* {ecn}/roce_rp/enable/*")
                )
    return PROBES + tuple(extra)


def _run_line(probe: Probe, procfs: str, sysfs: str) -> str:
    cmd = probe.command.replace("{procfs}", procfs).replace("{sysfs}", sysfs)
    f = shlex.quote(probe.file)
    return f"timeout {probe.timeout} sh -c {shlex.quote(cmd)} >{f} 2>{f}.stderr; echo $? >{f}.rc"


def script(
    procfs: str = "/proc",
    sysfs: str = "/sys",
    probes: Sequence[Probe] = PROBES,
    bandwidth: Sequence[Probe] = (),
) -> str:
    """The one command a node runs; it prints a base64 tar of the probe outputs.

    State probes run first; bandwidth probes only after the pre-conditions hold (probe lock
    taken, GPUs idle, no other probe process), else the reason is recorded instead.
    """
    from gpuboot.probes import PRECONDITIONS, precondition_script

    lines = ["d=$(mktemp -d) || exit 97", 'cd "$d" || exit 97']
    lines += [_run_line(p, procfs, sysfs) for p in probes]
    if bandwidth:
        lines += precondition_script("nvidia-smi_-q.txt")
        lines.append(f"if [ ! -s {PRECONDITIONS} ]; then")
        lines += [_run_line(p, procfs, sysfs) for p in bandwidth]
        lines.append("fi")
    lines += ["tar -cf - . | base64 -w0", 'cd / && rm -rf "$d"']
    return "\n".join(lines)


def unpack(payload: str) -> Evidence:
    evidence: Evidence = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(payload))) as tar:
        files = {
            m.name.removeprefix("./"): tar.extractfile(m) for m in tar.getmembers() if m.isfile()
        }
        raw = {name: f.read().decode(errors="replace") for name, f in files.items() if f}
    for name in sorted(raw):
        if name.endswith((".stderr", ".rc")):
            continue
        evidence[name] = ProbeOutput(
            stdout=raw[name],
            stderr=raw.get(name + ".stderr", ""),
            rc=int(raw.get(name + ".rc", "0").strip() or 255),
        )
    return evidence


def write_host_bundle(host_dir: Path, evidence: Evidence, meta: dict) -> None:
    """``<bundle>/<host>/<probe-file>`` (stdout only) plus meta.json (rc, stderr, context)."""
    host_dir.mkdir(parents=True, exist_ok=True)
    for name, out in evidence.items():
        (host_dir / name).write_text(out.stdout)
    meta = {**meta, "probes": {n: {"rc": o.rc, "stderr": o.stderr} for n, o in evidence.items()}}
    (host_dir / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def read_host_bundle(host_dir: Path) -> tuple[Evidence, dict]:
    """Read back what write_host_bundle wrote; a bundle of real captures may lack meta.json."""
    meta_path = host_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    probes = meta.get("probes", {})
    evidence: Evidence = {}
    for path in sorted(host_dir.iterdir()):
        if path.name == "meta.json" or not path.is_file():
            continue
        info = probes.get(path.name, {})
        evidence[path.name] = ProbeOutput(
            stdout=path.read_text(errors="replace"),
            stderr=info.get("stderr", ""),
            rc=info.get("rc", 0),
        )
    return evidence, meta
