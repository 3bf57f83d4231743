"""Evidence collection: every probe of a node in one SSH round trip.

The node runs one shell script that stores each probe's stdout, stderr and exit
code in a temp dir and sends it back as a base64 gzipped tar, so stdout reaches the
bundle byte for byte (DESIGN.md: each probe file holds the unmodified stdout). gzip
because the controller parses every byte of every answer (through an executor, twice:
its stream and its event): ~150 small files are mostly tar headers and padding.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import re
import shlex
import tarfile
import zlib
from collections.abc import Sequence
from typing import Any

from gpuboot.bundle import names
from gpuboot.bundle.model import (
    MAX_FILE_BYTES,
    MAX_NODE_BYTES,
    MAX_STDERR_KEPT,
    Evidence,
    ProbeOutput,
)
from gpuboot.bundle.names import is_safe_name
from gpuboot.components import components as component_table
from gpuboot.errors import GpubootError
from gpuboot.evidence.mlxconfig import mlxconfig_command, mlxconfig_file
from gpuboot.evidence.packages import DPKG_QUERY
from gpuboot.evidence.rdma_cm import RDMA_CM_FILE, rdma_cm_command
from gpuboot.evidence.rdma_system import RDMA_SYSTEM_COMMAND, RDMA_SYSTEM_FILE
from gpuboot.evidence.sriov import sriov_command, sriov_file
from gpuboot.probes import Probe, precondition_script

# Fields of the one --query-gpu call; the file name records the command, the fields
# are kept in meta.json.
QUERY_FIELDS = (
    "index,name,uuid,serial,pci.bus_id,driver_version,vbios_version,persistence_mode,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
    "ecc.mode.current,ecc.errors.uncorrected.volatile.total,mig.mode.current,mig.mode.pending,"
    "temperature.gpu"
)
COMPANIONS = (".stderr", ".rc")
RC_FAILED = 255  # a probe whose exit code is missing or unreadable did not succeed
DEFAULT_CONFIGFS = "/sys/kernel/config"  # hostvar gpuboot_configfs: RDMA CM's defaults below it


class NodeAnswerRejected(GpubootError):
    """A node's collection answer is not what the collection script produces (unexpected
    names, links, special files, oversize): the node's shell or tar is not gpuboot's. Its
    evidence is judged ERROR and nothing of it is written."""


PROBES: tuple[Probe, ...] = (
    Probe(names.QUERY_GPU_FILE, f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv"),
    Probe(names.SMI_Q_FILE, "nvidia-smi -q"),
    Probe(names.DMESG_FILE, "dmesg"),
    Probe(names.LSMOD_FILE, "lsmod"),
    Probe(names.NVIDIA_VERSION_FILE, "cat {procfs}/driver/nvidia/version"),
    Probe(names.DPKG_FILE, DPKG_QUERY),
    Probe(names.APT_HOLDS_FILE, "apt-mark showhold"),
    Probe(names.APT_UNATTENDED_FILE, "apt-config dump Unattended-Upgrade"),
    Probe(names.REBOOT_REQUIRED_FILE, "cat /var/run/reboot-required* 2>/dev/null; true"),
)


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
        Probe(names.LSPCI_GPU_FILE, "lspci -n -d 10de:"),
        Probe(names.TOPO_FILE, "nvidia-smi topo -m"),
    ]
    if hw["nics"]:
        extra.append(Probe(names.LSPCI_NIC_FILE, "lspci -n -d 15b3:"))
    if (hostvars or {}).get("nvidia_mig_layout") is not None:
        # exits non-zero with "No MIG-enabled devices found." or "No GPU instances found":
        # facts MIG-001 judges, not probe failures
        extra.append(Probe(names.MIG_LGI_FILE, "nvidia-smi mig -lgi"))
    if int(hw["nvlink"]["links_per_gpu"]):
        extra += [
            Probe(names.NVLINK_STATUS_FILE, "nvidia-smi nvlink -s"),
            Probe(names.NVLINK_ERRORS_FILE, "nvidia-smi nvlink -e"),
        ]
    if int(hw["nvlink"].get("nvswitch_count", 0) or 0):
        extra.append(Probe(names.FABRICMANAGER_FILE, "systemctl is-active nvidia-fabricmanager"))
    extra += _unit_probes(hostvars or {}, {p.file for p in extra})
    if hw["nics"]:
        extra.append(Probe(names.IBSTAT_FILE, "ibstat"))
        for nic in hw["nics"]:
            if nic.get("link_layer") == "Ethernet":
                dev = nic["netdev"]
                extra.append(Probe(names.mlnx_qos_file(dev), f"mlnx_qos -i {shlex.quote(dev)}"))
                ecn = shlex.quote(f"{{sysfs}}/class/net/{dev}/ecn")
                extra.append(
                    Probe(
                        names.ecn_file(dev),
                        f"grep -H . {ecn}/roce_np/enable/* {ecn}/roce_rp/enable/*",
                    )
                )
    return PROBES + tuple(extra) + rail_probes(hw["nics"], hostvars or {})


def rail_probes(nics: list[dict[str, Any]], hostvars: dict[str, Any]) -> tuple[Probe, ...]:
    """What the RoCE rails' rules read: the GID table (NIC-004) and each rail's counters
    (NIC-005) where DOCA-OFED's tools are installed; and, where the host prepares pod RDMA
    (gpuboot_rdma_cni sriov or shared), the RDMA netns mode, RDMA CM's configfs defaults
    and each rail PF's SR-IOV listing (RDM-001..006), under sriov its firmware's too."""
    rails = [n["netdev"] for n in nics if n.get("link_layer") == "Ethernet"]
    if not rails or not hostvars.get("doca_ofed_enabled"):
        return ()
    probes = [Probe(names.GIDS_FILE, "show_gids")]
    probes += [Probe(f"ethtool_-S_{dev}.txt", f"ethtool -S {shlex.quote(dev)}") for dev in rails]
    if str(hostvars.get("gpuboot_rdma_cni", "none")) in ("sriov", "shared"):
        configfs = shlex.quote(str(hostvars.get("gpuboot_configfs", DEFAULT_CONFIGFS)))
        probes += [
            Probe(RDMA_SYSTEM_FILE, RDMA_SYSTEM_COMMAND),
            Probe(RDMA_CM_FILE, rdma_cm_command(configfs)),
        ]
        probes += [Probe(sriov_file(dev), sriov_command(dev)) for dev in rails]
        if hostvars.get("gpuboot_rdma_cni") == "sriov":  # why a PF has too few VFs
            pcis = [n["pci_bus_id"] for n in nics if n["netdev"] in rails and n.get("pci_bus_id")]
            probes += [Probe(mlxconfig_file(pci), mlxconfig_command(pci)) for pci in pcis]
    return tuple(probes)


def _unit_probes(hostvars: dict[str, Any], taken: set[str]) -> list[Probe]:
    """The state of every unit an optional component runs where the host's stack enables
    it (the table's ``services`` column), so a new component's rule has its evidence
    without a probe written for it here."""
    probes = []
    for c in component_table():
        if not (c.optional and c.services and hostvars.get(f"{c.prefix}_enabled")):
            continue
        for unit in c.services:
            file = names.unit_active_file(unit)
            if file not in taken:
                taken.add(file)
                probes.append(Probe(file, f"systemctl is-active {shlex.quote(unit)}"))
    return probes


def _run_line(probe: Probe, procfs: str, sysfs: str) -> str:
    """One probe: its stdout, stderr, and the trailer "<exit code> <stdout bytes>" written
    once the command has ended (parse_trailer): the end marker a cut output lacks."""
    cmd = probe.command.replace("{procfs}", procfs).replace("{sysfs}", sysfs)
    f = shlex.quote(probe.file)
    return (
        f"timeout {probe.timeout} sh -c {shlex.quote(cmd)} >{f} 2>{f}.stderr; "
        f'rc=$?; echo "$rc $(wc -c <{f})" >{f}.rc'
    )


def script(
    procfs: str = "/proc",
    sysfs: str = "/sys",
    probes: Sequence[Probe] = PROBES,
    bandwidth: Sequence[Probe] = (),
) -> str:
    """The one command a node runs; it prints a base64 gzipped tar of the probe outputs.

    State probes run first; bandwidth probes only after the pre-conditions hold (probe lock
    taken, GPUs idle, no other probe process), else the reason is recorded instead.
    """
    lines = ["d=$(mktemp -d) || exit 97", 'cd "$d" || exit 97']
    lines += [_run_line(p, procfs, sysfs) for p in probes]
    if bandwidth:
        lines += precondition_script(names.SMI_Q_FILE)
        lines.append(f"if [ ! -s {names.PRECONDITIONS_FILE} ]; then")
        lines += [_run_line(p, procfs, sysfs) for p in bandwidth]
        lines.append("fi")
    lines += ["tar -cf - . | gzip -c | base64 -w0", 'cd / && rm -rf "$d"']
    return "\n".join(lines)


def expected_files(
    probes: Sequence[Probe] = PROBES, bandwidth: Sequence[Probe] = ()
) -> tuple[frozenset[str], frozenset[str]]:
    """(probe files, which come with .stderr/.rc companions; plain files) the collection
    script with these arguments can produce: nothing else is accepted from a node."""
    files = frozenset(p.file for p in (*probes, *bandwidth))
    return files, frozenset({names.PRECONDITIONS_FILE} if bandwidth else ())


def parse_rc(text: str | None) -> int:
    """A probe's exit code from its .rc trailer; missing or garbage means it failed."""
    try:
        rc = int((text or "").split(maxsplit=1)[0])
    except (ValueError, IndexError):
        return RC_FAILED
    return rc if 0 <= rc <= 255 else RC_FAILED


def ended_short(name: str, size: int, trailer: str | None) -> str:
    """Why ``name``'s ``size`` bytes are not the whole output its .rc trailer says the node
    wrote ("" when they are): no trailer, no byte count in it, or another count."""
    fields = (trailer or "").split()
    # ASCII digits, a file's size at most: a node's 5,000-digit count is no count either
    if len(fields) != 2 or not re.fullmatch(r"[0-9]{1,15}", fields[1]):
        return f"{name}: truncated: no end marker (the node's collection did not finish it)"
    if int(fields[1]) != size:
        return f"{name}: truncated: {size} bytes received of the {fields[1]} the node wrote"
    return ""


def _reject(why: str) -> NodeAnswerRejected:
    return NodeAnswerRejected(
        f"collection answer rejected: {why}; nothing of it was written",
        hint="the node's shell, tar or gzip answered with something gpuboot's collection script "
        "never produces: inspect the node (a replaced tar, a hostile or broken shell)",
    )


# What a tar adds to its members' bytes, per member at most: its header, a GNU long-name
# header and name block, and the padding of its data to a 512-byte block.
TAR_MEMBER_OVERHEAD = 4 * 512
# After the end-of-archive blocks GNU tar pads its output to a 10,240-byte record; the
# stream reader may stop up to a record before that: what may follow the last member.
TAR_TAIL = 2 * tarfile.RECORDSIZE


def inflate_cap(allowed: frozenset[str]) -> int:
    """Bytes a node's answer may inflate to: the per-node cap, and a tar's overhead for
    every file the script may send (and its "." directory)."""
    return MAX_NODE_BYTES + TAR_MEMBER_OVERHEAD * (len(allowed) + 1) + TAR_TAIL


class _Inflated:
    """The payload's gzip, inflated as it is read (tarfile's stream reader needs only
    ``read``) and never past ``cap`` bytes: a gzip bomb costs the controller at most the
    per-node cap, never its ratio."""

    def __init__(self, data: bytes, cap: int):
        self._gz = gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")
        self._left = cap

    def read(self, size: int | None = -1) -> bytes:
        want = self._left + 1 if size is None or size < 0 else min(size, self._left + 1)
        try:
            chunk = self._gz.read(want)
        except (OSError, EOFError, zlib.error) as exc:  # not gzip, cut, corrupt, bad CRC
            raise _reject(f"payload is not a readable gzip ({exc})") from None
        self._left -= len(chunk)
        if self._left < 0:
            raise _reject("payload inflates past the per-node cap")
        return chunk


def _tar_members(payload: str, allowed: frozenset[str]) -> dict[str, bytes]:
    """The payload's regular files, each a name the script asked for, within the caps."""
    cap = inflate_cap(allowed)
    # gzip adds a few bytes per 32 KB stored block to data it cannot shrink
    if len(payload) > (cap + cap // 1000 + 1024) * 4 // 3:
        raise _reject(f"payload of {len(payload)} bytes exceeds the per-node cap")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _reject(f"payload is not base64 ({exc})") from None
    stream = _Inflated(data, cap)
    out: dict[str, bytes] = {}
    total = 0
    try:
        # "r|": a plain tar read as it inflates (the gzip is the only compression: a
        # compressed tar inside could expand without bound)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
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
                # its size, checked above: a larger read would allocate its size up front
                out[name] = f.read(m.size) if f else b""
    except tarfile.TarError as exc:
        raise _reject(f"payload is not a readable tar ({exc})") from None
    # to its end: only there does gzip see a cut stream or a wrong CRC; and what follows
    # the tar is its padding, not a bomb's zeros inflated to the cap
    if len(stream.read(TAR_TAIL + 1)) > TAR_TAIL or stream.read(1):
        raise _reject("data past the tar's end")
    return out


def unpack(
    payload: str, probes: Sequence[Probe] = PROBES, bandwidth: Sequence[Probe] = ()
) -> Evidence:
    """The node's answer to ``script(..., probes, bandwidth)`` as evidence, or
    NodeAnswerRejected: only the files that script asks for, as regular files in caps."""
    files, plain = expected_files(probes, bandwidth)
    allowed = plain | {f + c for f in files for c in ("", *COMPANIONS)}
    members = _tar_members(payload, allowed)
    raw = {n: b.decode(errors="replace") for n, b in members.items()}
    evidence: Evidence = {}
    for name in sorted(raw):
        if name in plain:
            evidence[name] = ProbeOutput(raw[name], "", 0)
        elif name in files:
            stderr = raw.get(name + ".stderr", "")[:MAX_STDERR_KEPT]
            trailer = raw.get(name + ".rc")
            cut = ended_short(name, len(members[name]), trailer)
            evidence[name] = ProbeOutput(raw[name], stderr, parse_rc(trailer), cut)
    return evidence
