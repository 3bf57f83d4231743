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
from dataclasses import dataclass
from pathlib import Path

# Fields of the one --query-gpu call; the file name records the command, the fields
# are kept in meta.json.
QUERY_FIELDS = (
    "index,name,uuid,serial,pci.bus_id,driver_version,vbios_version,persistence_mode,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
    "ecc.mode.current,ecc.errors.uncorrected.volatile.total,mig.mode.current,temperature.gpu"
)
PROBE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Probe:
    file: str  # evidence file name: the command with spaces as "_"
    command: str  # may use {procfs} and {sysfs}


PROBES: tuple[Probe, ...] = (
    Probe(
        "nvidia-smi_--query-gpu_--format=csv.csv",
        f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv",
    ),
    Probe("nvidia-smi_-q.txt", "nvidia-smi -q"),
    Probe("dmesg.txt", "dmesg"),
    Probe("lsmod.txt", "lsmod"),
    Probe("proc_driver_nvidia_version.txt", "cat {procfs}/driver/nvidia/version"),
    Probe(
        "dpkg-query_-W.txt", "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'"
    ),
    Probe("apt-mark_showhold.txt", "apt-mark showhold"),
    Probe("reboot-required.txt", "cat /var/run/reboot-required* 2>/dev/null; true"),
)


@dataclass(frozen=True)
class ProbeOutput:
    stdout: str
    stderr: str
    rc: int


Evidence = dict[str, ProbeOutput]


def script(procfs: str = "/proc", sysfs: str = "/sys") -> str:
    """The one command a node runs; it prints a base64 tar of the probe outputs."""
    lines = ["d=$(mktemp -d) || exit 97", 'cd "$d" || exit 97']
    for probe in PROBES:
        cmd = probe.command.replace("{procfs}", procfs).replace("{sysfs}", sysfs)
        f = shlex.quote(probe.file)
        lines.append(
            f"timeout {PROBE_TIMEOUT_S} sh -c {shlex.quote(cmd)} >{f} 2>{f}.stderr; echo $? >{f}.rc"
        )
    lines += ["tar -cf - . | base64 -w0", 'cd / && rm -rf "$d"']
    return "\n".join(lines)


def unpack(payload: str) -> Evidence:
    evidence: Evidence = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(payload))) as tar:
        files = {
            m.name.removeprefix("./"): tar.extractfile(m) for m in tar.getmembers() if m.isfile()
        }
        raw = {name: f.read().decode(errors="replace") for name, f in files.items() if f}
    for probe in PROBES:
        if probe.file in raw:
            evidence[probe.file] = ProbeOutput(
                stdout=raw[probe.file],
                stderr=raw.get(probe.file + ".stderr", ""),
                rc=int(raw.get(probe.file + ".rc", "255").strip() or 255),
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
