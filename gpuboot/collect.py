"""Evidence collection: every probe of a node in one SSH round trip.

The node runs one shell script that stores each probe's stdout, stderr and exit
code in a temp dir and sends it back as a base64 tar, so stdout reaches the bundle
byte for byte (DESIGN.md: each probe file holds the unmodified stdout).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import shlex
import stat
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuboot import paths
from gpuboot.errors import GpubootError
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
# The PCI bus's own count of the parts (PCI-002) and the GPU/NIC connection matrix
LSPCI_GPU_FILE = "lspci_-n_-d_10de:.txt"
LSPCI_NIC_FILE = "lspci_-n_-d_15b3:.txt"
TOPO_FILE = "nvidia-smi_topo_-m.txt"

# What a node may send back, and what evaluate reads from a bundle: a node (and a bundle
# that left the controller) is less trusted than the controller, so its answer is data
# within limits, never a path to write or a file to follow.
MAX_FILE_BYTES = 64 * 1024 * 1024  # one probe file
MAX_NODE_BYTES = 256 * 1024 * 1024  # all of a node's files together
MAX_STDERR_KEPT = 64 * 1024  # a probe's stderr is read for its first line only
MAX_META_BYTES = 16 * 1024 * 1024  # meta.json (per-file rc/stderr included)
COMPANIONS = (".stderr", ".rc")
META = "meta.json"
MANIFEST = "MANIFEST.json"
RC_FAILED = 255  # a probe whose exit code is missing or unreadable did not succeed


class NodeAnswerRejected(GpubootError):
    """A node's collection answer is not what the collection script produces (unexpected
    names, links, special files, oversize): the node's shell or tar is not gpuboot's. Its
    evidence is judged ERROR and nothing of it is written."""


class BundleError(GpubootError):
    """A host's evidence cannot be kept or read back safely (an unsafe name; links, special
    files, oversize, malformed meta.json in a bundle): that host is ERROR, the others are
    judged."""


def is_safe_name(name: object) -> bool:
    """A plain file name: one path component, not '.'/'..', no '/', no NUL, not empty."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\0" not in name
    )


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
    extra: list[Probe] = [
        Probe(LSPCI_GPU_FILE, "lspci -n -d 10de:"),
        Probe(TOPO_FILE, "nvidia-smi topo -m"),
    ]
    if hw["nics"]:
        extra.append(Probe(LSPCI_NIC_FILE, "lspci -n -d 15b3:"))
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


def expected_files(
    probes: Sequence[Probe] = PROBES, bandwidth: Sequence[Probe] = ()
) -> tuple[frozenset[str], frozenset[str]]:
    """(probe files, which come with .stderr/.rc companions; plain files) the collection
    script with these arguments can produce: nothing else is accepted from a node."""
    from gpuboot.probes import PRECONDITIONS

    files = frozenset(p.file for p in (*probes, *bandwidth))
    return files, frozenset({PRECONDITIONS} if bandwidth else ())


def parse_rc(text: str | None) -> int:
    """A probe's exit code from its .rc companion; missing or garbage means it failed."""
    try:
        rc = int((text or "").strip())
    except ValueError:
        return RC_FAILED
    return rc if 0 <= rc <= 255 else RC_FAILED


def _reject(why: str) -> NodeAnswerRejected:
    return NodeAnswerRejected(
        f"collection answer rejected: {why}; nothing of it was written",
        hint="the node's shell or tar answered with something gpuboot's collection script "
        "never produces: inspect the node (a replaced tar, a hostile or broken shell)",
    )


def _tar_members(payload: str, allowed: frozenset[str]) -> dict[str, bytes]:
    """The payload's regular files, each a name the script asked for, within the caps."""
    if len(payload) > (MAX_NODE_BYTES + 64 * 1024) * 4 // 3:  # + tar headers
        raise _reject(f"payload of {len(payload)} bytes exceeds the per-node cap")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _reject(f"payload is not base64 ({exc})") from None
    out: dict[str, bytes] = {}
    total = 0
    try:
        # "r:" reads an uncompressed tar only: a compressed one could expand without bound
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for m in tar:
                if m.isdir() and m.name in (".", "./"):
                    continue
                name = m.name.removeprefix("./")
                if not is_safe_name(name) or name not in allowed:
                    raise _reject(f"unexpected member {m.name!r} (not a probe file)")
                if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    raise _reject(f"member {m.name!r} is not a regular file")
                if name in out:
                    raise _reject(f"member {m.name!r} appears twice")
                total += m.size
                if m.size > MAX_FILE_BYTES or total > MAX_NODE_BYTES:
                    raise _reject(f"member {m.name!r} exceeds the size cap")
                f = tar.extractfile(m)
                out[name] = f.read(MAX_FILE_BYTES + 1) if f else b""
    except tarfile.TarError as exc:
        raise _reject(f"payload is not a readable tar ({exc})") from None
    return out


def unpack(
    payload: str, probes: Sequence[Probe] = PROBES, bandwidth: Sequence[Probe] = ()
) -> Evidence:
    """The node's answer to ``script(..., probes, bandwidth)`` as evidence, or
    NodeAnswerRejected: only the files that script asks for, as regular files in caps."""
    files, plain = expected_files(probes, bandwidth)
    allowed = plain | {f + c for f in files for c in ("", *COMPANIONS)}
    raw = {n: b.decode(errors="replace") for n, b in _tar_members(payload, allowed).items()}
    evidence: Evidence = {}
    for name in sorted(raw):
        if name in plain:
            evidence[name] = ProbeOutput(raw[name], "", 0)
        elif name in files:
            stderr = raw.get(name + ".stderr", "")[:MAX_STDERR_KEPT]
            evidence[name] = ProbeOutput(raw[name], stderr, parse_rc(raw.get(name + ".rc")))
    return evidence


def bundle_host_dir(bundle: Path, host: str) -> Path:
    """``<bundle>/<host>``, for a host name that is one safe path component only."""
    if not is_safe_name(host):
        raise BundleError(
            f"host name {host!r} is not a single safe path component",
            where=str(bundle),
            hint="host names become directory names: use plain inventory host names",
        )
    return bundle / host


def write_host_bundle(host_dir: Path, evidence: Evidence, meta: dict) -> None:
    """``<bundle>/<host>/<probe-file>`` (stdout only) plus meta.json (context, and each
    file's rc/stderr under "outputs"); 0700 directory, 0600 files, plain names only."""
    if ".." in host_dir.parts or not is_safe_name(host_dir.name):
        raise BundleError("host directory is not <bundle>/<plain name>", where=str(host_dir))
    bad = [n for n in evidence if not is_safe_name(n) or n in (META, MANIFEST)]
    if bad:
        raise BundleError(
            f"evidence file name(s) {bad!r} are not plain probe file names",
            where=str(host_dir),
            hint="evidence names come from the collection script and pair probes only",
        )
    if os.path.islink(host_dir):
        raise BundleError("host directory is a link", where=str(host_dir))
    paths.private_dir(host_dir.parent)  # the bundle, and each host in it: 0700
    paths.private_dir(host_dir)
    # 0600, atomically replaced: a link planted at a file's name is replaced, not followed
    for name, out in evidence.items():
        paths.write_private(host_dir / name, out.stdout)
    outputs = {n: {"rc": o.rc, "stderr": o.stderr} for n, o in evidence.items()}
    meta = {**meta, "outputs": outputs}
    paths.write_private(host_dir / META, json.dumps(meta, indent=2, sort_keys=True))


def read_file_capped(path: Path, cap: int | None = None) -> bytes:
    """A regular file's bytes, never following a link nor blocking on a FIFO or device."""
    cap = MAX_FILE_BYTES if cap is None else cap
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise BundleError(
            f"cannot open {path.name} ({exc.strerror}): not a regular file or unreadable",
            where=str(path),
        ) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path.name} is not a regular file", where=str(path))
        if st.st_size > cap:
            raise BundleError(
                f"{path.name} is {st.st_size} bytes, over the {cap}-byte cap", where=str(path)
            )
        data = f.read(cap + 1)
    if len(data) > cap:
        raise BundleError(f"{path.name} grew past the {cap}-byte cap", where=str(path))
    return data


def read_host_files(host_dir: Path) -> dict[str, bytes]:
    """Every file of a host directory: regular files only (no links, FIFOs, devices or
    subdirectories: BundleError), each and all together within the caps."""
    try:
        if not stat.S_ISDIR(os.lstat(host_dir).st_mode):
            raise BundleError("host directory is a link or not a directory", where=str(host_dir))
        names = sorted(os.listdir(host_dir))
    except OSError as exc:
        raise BundleError(f"cannot list ({exc.strerror})", where=str(host_dir)) from None
    files: dict[str, bytes] = {}
    total = 0
    for name in names:
        path = host_dir / name
        try:
            mode = os.lstat(path).st_mode
        except OSError as exc:
            raise BundleError(f"cannot stat ({exc.strerror})", where=str(path)) from None
        if not stat.S_ISREG(mode):
            raise BundleError(
                f"{name!r} is a link, directory or special file, not evidence",
                where=str(path),
                hint="a bundle holds regular files only; re-run certify for fresh evidence",
            )
        files[name] = read_file_capped(path)
        total += len(files[name])
        if total > MAX_NODE_BYTES:
            raise BundleError(
                f"the host's files exceed the {MAX_NODE_BYTES}-byte cap", where=str(host_dir)
            )
    return files


def _outputs(meta: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """Per-file rc/stderr; bundles before "outputs" kept them under "probes" (which now
    holds the probe level), so an old bundle's level is unknown."""
    old = meta.pop("probes") if isinstance(meta.get("probes"), dict) else None
    if meta.get("probes") is not None and not isinstance(meta["probes"], str):
        raise BundleError("meta.json: probes must name the probe level", where=where)
    outputs = meta.get("outputs", old) or {}
    if not isinstance(outputs, dict) or not all(
        isinstance(v, dict)
        and isinstance(v.get("rc", 0), int)
        and not isinstance(v.get("rc", 0), bool)
        and isinstance(v.get("stderr", ""), str)
        for v in outputs.values()
    ):
        raise BundleError("meta.json: outputs must map files to {rc, stderr}", where=where)
    return outputs


def parse_meta(data: bytes | None, where: str) -> dict[str, Any]:
    """meta.json as a JSON object of bounded size ({} when absent: real captures)."""
    if data is None:
        return {}
    if len(data) > MAX_META_BYTES:
        raise BundleError(f"meta.json over the {MAX_META_BYTES}-byte cap", where=where)
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BundleError(f"meta.json is not valid JSON ({exc})", where=where) from None
    if not isinstance(meta, dict):
        raise BundleError("meta.json is not a JSON object", where=where)
    for key, kind in (("pins", dict), ("rules", list), ("pairs", dict)):
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            raise BundleError(f"meta.json: {key} must be a {kind.__name__}", where=where)
    if not all(isinstance(r, str) for r in meta.get("rules") or []):
        raise BundleError("meta.json: rules must list rule ids", where=where)
    return meta


def host_bundle(files: dict[str, bytes], where: str) -> tuple[Evidence, dict]:
    """Evidence and meta from a host directory's files (read_host_files)."""
    meta = parse_meta(files.get(META), where)
    outputs = _outputs(meta, where)
    evidence: Evidence = {}
    for name, data in files.items():
        if name == META:
            continue
        info = outputs.get(name, {})
        evidence[name] = ProbeOutput(
            stdout=data.decode(errors="replace"),
            stderr=info.get("stderr", ""),
            rc=info.get("rc", 0),
        )
    return evidence, meta


def read_host_bundle(host_dir: Path) -> tuple[Evidence, dict]:
    """Read back what write_host_bundle wrote; a bundle of real captures may lack meta.json."""
    return host_bundle(read_host_files(host_dir), str(host_dir))
