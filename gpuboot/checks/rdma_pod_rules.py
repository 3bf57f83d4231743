"""RDMA for Kubernetes pods (RDM-001..006): what an SR-IOV or RDMA-shared CNI (Spiderpool, the
SR-IOV network operator, the RDMA shared device plugin) expects of a node before it joins.

``gpuboot_rdma_cni`` says which: ``sriov`` (``gpuboot_rdma_vfs`` VFs per rail PF, each with an
RDMA device, moved into pods: the RDMA subsystem in ``exclusive`` netns mode), ``shared``
(the rail devices shared by every pod's namespace: ``shared`` mode) or ``none`` (the
default: every rule SKIPPED). Every rule is fault_first: a fault read in a listing cut short
FAILs (a count, a mode, a ToS, an MTU is what it says), while what a cut listing does not
show is not read (ERROR), never missing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuboot.bundle.model import Evidence
from gpuboot.checks.base import (
    NodeContext,
    ProbeFailed,
    Result,
    not_applicable,
    parsed,
    probe,
    tool_failure,
)
from gpuboot.checks.fabric_rules import roce_rails
from gpuboot.checks.smi import seen_or_unread
from gpuboot.errors import ParseError
from gpuboot.evidence.mlxconfig import mlxconfig_file, parse_mlxconfig_query
from gpuboot.evidence.rdma_cm import RDMA_CM_FILE, parse_rdma_cm
from gpuboot.evidence.rdma_system import RDMA_SYSTEM_FILE, parse_rdma_system
from gpuboot.evidence.sriov import ROCE_V2, PfState, parse_sriov, sriov_file

CNI_MODES = ("none", "sriov", "shared")
NETNS_MODE = {"sriov": "exclusive", "shared": "shared"}  # what each CNI mode needs
DEFAULT_CM_DSCP = 26  # RoCE's usual lossless class: DSCP 26 -> priority 3 under trust dscp
DEFAULT_MTU = 9000
SRIOV_FILES = "sysfs_sriov_*.txt"


def cni_mode(hostvars: dict[str, Any]) -> str:
    return str(hostvars.get("gpuboot_rdma_cni", "none"))


def cm_tos(hostvars: dict[str, Any]) -> int:
    """The ToS byte RDMA CM must use: the DSCP in its upper six bits (ECN bits are the NIC's)."""
    return int(hostvars.get("gpuboot_rdma_cm_dscp", DEFAULT_CM_DSCP)) << 2


@dataclass(frozen=True)
class _Read:
    """One file as read: its text (a cut file without its partial last line) and whether
    it is whole."""

    name: str
    text: str
    cut: str  # why it is not whole ("": whole)


def _read(evidence: Evidence, name: str) -> _Read:
    out = probe(evidence, name)  # a fault_first rule's own files may come cut
    if out.incomplete:
        text = out.stdout[: out.stdout.rfind("\n") + 1]  # the last line may stop midway
        return _Read(name, text, out.incomplete)
    if why := tool_failure(name, out):
        raise ProbeFailed(why, where=name)
    return _Read(name, out.stdout, "")


def _parse(read: _Read, parser: Callable[..., Any], *args: Any) -> Any:
    try:
        return parsed(parser, read.text, *args)
    except ParseError as exc:
        raise ProbeFailed(exc.message, where=read.name) from None


@dataclass(frozen=True)
class _Rail:
    nic: dict[str, Any]
    read: _Read
    state: PfState

    @property
    def name(self) -> str:
        return f"{self.nic['netdev']} (GPU {self.nic.get('gpu', '?')})"


def _setup(ctx: NodeContext, sriov_only: bool = False) -> tuple[str, list[dict]] | Result:
    """(CNI mode, the rail NICs), or why the rule does not apply."""
    mode = cni_mode(ctx.hostvars)
    if mode == "none":
        return not_applicable("not configured (gpuboot_rdma_cni is none)")
    if sriov_only and mode != "sriov":
        return not_applicable(f"gpuboot_rdma_cni is {mode}: no VFs")
    rails = roce_rails(ctx)
    return rails if isinstance(rails, Result) else (mode, rails)


def _rails(evidence: Evidence, nics: list[dict]) -> list[_Rail]:
    out = []
    for nic in nics:
        read = _read(evidence, sriov_file(nic["netdev"]))
        out.append(_Rail(nic, read, _parse(read, parse_sriov, nic["netdev"])))
    return out


class _Verdict:
    """Faults seen and what was not read, judged in the house order (seen_or_unread)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.gaps: list[str] = []
        self.where = ""

    def absent(self, read: _Read, fault: str) -> None:
        """Something the listing does not show: a fault in a whole listing, unread in a cut one."""
        if read.cut:
            self.unread(read, f"{read.name} is cut before {fault.split(':')[0]}")
        else:
            self.problems.append(fault)

    def unread(self, read: _Read, gap: str) -> None:
        self.gaps.append(gap)
        self.where = self.where or read.name

    def result(self, passed: str) -> str | Result | None:
        out = seen_or_unread(self.problems, "; ".join(self.gaps) or None, self.where)
        return Result("PASS", passed) if out is None else out


# ------------------------------------------------------------------------------- rules
def check_vf_count(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """RDM-001: every rail PF has gpuboot_rdma_vfs VFs (sriov_numvfs), within what its
    firmware allows (sriov_totalvfs: NUM_OF_VFS)."""
    setup = _setup(ctx, sriov_only=True)
    if isinstance(setup, Result):
        return setup
    want = int(ctx.var("gpuboot_rdma_vfs", 0))
    v = _Verdict()
    for rail in _rails(evidence, setup[1]):
        s = rail.state
        if not s.sriov:
            v.absent(rail.read, f"{rail.name}: no SR-IOV (sriov_totalvfs absent: SRIOV_EN off)")
        elif s.num_vfs is None:
            v.unread(rail.read, f"{rail.read.name} shows no sriov_numvfs value")
        elif s.num_vfs != want:
            cap = f" (the firmware allows {s.total_vfs})" if (s.total_vfs or 0) < want else ""
            note = _firmware(evidence, rail.nic, want) if cap or not s.sriov else ""
            v.problems.append(f"{rail.name}: {s.num_vfs} VF(s), want {want}{cap}{note}")
    return v.result(f"{want} VF(s) on each of the {len(setup[1])} rail PF(s)")


def _firmware(evidence: Evidence, nic: dict[str, Any], want: int) -> str:
    """Why the running firmware allows too few VFs, from its mlxconfig query where it was read
    whole (an explanation only: the count judged is the kernel's): a setting waiting for the
    next boot, or one still to make."""
    out = evidence.get(mlxconfig_file(str(nic.get("pci_bus_id", ""))))
    if out is None or out.incomplete or out.rc != 0:
        return ""
    try:
        fw = parse_mlxconfig_query(out.stdout)
    except ParseError:
        return ""
    enabled, vfs = fw.number("SRIOV_EN"), fw.number("NUM_OF_VFS")
    if enabled is None or vfs is None:
        return ""
    if enabled and vfs >= want:
        return f"; the firmware allows {vfs} from the next boot: reboot pending"
    return (
        f"; the firmware's next boot has SRIOV_EN {enabled}, NUM_OF_VFS {vfs}: `mlxconfig -d "
        f"{nic.get('pci_bus_id')} set SRIOV_EN=1 NUM_OF_VFS={want}`, then reboot"
    )


def check_vf_devices(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """RDM-002: every rail PF's netdev at gpuboot_rdma_mtu; under sriov, every VF with an RDMA
    device and a netdev at that MTU."""
    setup = _setup(ctx)
    if isinstance(setup, Result):
        return setup
    mode, nics = setup
    mtu = int(ctx.var("gpuboot_rdma_mtu", DEFAULT_MTU))
    v = _Verdict()
    vfs = 0
    for rail in _rails(evidence, nics):
        s = rail.state
        if s.mtu != mtu:
            v.problems.append(f"{rail.name}: MTU {s.mtu}, want {mtu}")
        if mode != "sriov":
            continue
        if s.num_vfs is None:
            v.unread(rail.read, f"{rail.read.name} shows no sriov_numvfs value")
            continue
        for i in range(s.num_vfs):
            vfs += 1
            vf = s.vfs.get(i)
            label = f"{rail.nic['netdev']} VF {i}"
            if vf is None:
                v.absent(rail.read, f"{label}: no virtfn{i} link")
                continue
            if not vf.rdma_devices:
                v.absent(rail.read, f"{label} ({vf.address}): no RDMA device")
            if not vf.netdevs:
                v.absent(rail.read, f"{label} ({vf.address}): no netdev")
            for netdev, got in sorted(vf.netdevs.items()):
                if got is None:
                    v.unread(rail.read, f"{rail.read.name} shows no MTU of {netdev}")
                elif got != mtu:
                    v.problems.append(f"{label} netdev {netdev}: MTU {got}, want {mtu}")
    what = f" and {vfs} VF(s) with an RDMA device and a netdev" if mode == "sriov" else ""
    return v.result(f"{len(nics)} rail PF(s) at MTU {mtu}{what}")


def check_v2_gids(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """RDM-003: a RoCE v2 GID on each rail port and, under sriov, on each VF's RDMA device
    (sysfs gid_attrs/types)."""
    setup = _setup(ctx)
    if isinstance(setup, Result):
        return setup
    mode, nics = setup
    v = _Verdict()
    devices = 0
    for rail in _rails(evidence, nics):
        owners = [(rail.nic["netdev"], rail.state.rdma_devices, rail.state.gid_types)]
        if mode == "sriov":
            owners += [
                (f"{rail.nic['netdev']} VF {i}", vf.rdma_devices, vf.gid_types)
                for i, vf in sorted(rail.state.vfs.items())
            ]
        for label, devs, types in owners:
            if not devs and label == rail.nic["netdev"]:
                v.absent(rail.read, f"{label}: no RDMA device")
            for dev in devs:
                devices += 1
                if ROCE_V2 not in types.get(dev, []):
                    have = ", ".join(sorted(set(types.get(dev, [])))) or "none"
                    v.absent(rail.read, f"{label} ({dev}): no RoCE v2 GID (GID types: {have})")
    return v.result(f"a RoCE v2 GID on each of {devices} RDMA device(s)")


def check_netns_mode(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """RDM-004: the RDMA subsystem's netns mode is the CNI mode's (`rdma system show`)."""
    setup = _setup(ctx)
    if isinstance(setup, Result):
        return setup
    want = NETNS_MODE[setup[0]]
    read = _read(evidence, RDMA_SYSTEM_FILE)
    if read.cut and not read.text.strip():
        raise ProbeFailed(read.cut, where=read.name)
    got = _parse(read, parse_rdma_system).netns
    if got != want:
        return f"RDMA netns mode {got}, want {want} for gpuboot_rdma_cni {setup[0]}"
    return Result("PASS", f"RDMA netns mode {got}")


def check_cm_defaults(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """RDM-005: RDMA CM's default mode RoCE v2 and its ToS gpuboot_rdma_cm_dscp << 2 on every
    rail device (and every VF's, under sriov): otherwise RDMA CM connections leave as RoCE
    v1 or outside the lossless class."""
    setup = _setup(ctx)
    if isinstance(setup, Result):
        return setup
    mode, nics = setup
    tos = cm_tos(ctx.hostvars)
    cm_read = _read(evidence, RDMA_CM_FILE)
    cm = _parse(cm_read, parse_rdma_cm) if cm_read.text.strip() else {}
    if not cm_read.text.strip():  # not even the rdma_cm directory: nothing read
        raise ProbeFailed(cm_read.cut or f"{RDMA_CM_FILE} is empty", where=RDMA_CM_FILE)
    v = _Verdict()
    devices = []
    for rail in _rails(evidence, nics):
        devices += rail.state.rdma_devices
        if mode == "sriov":
            devices += [d for _i, vf in sorted(rail.state.vfs.items()) for d in vf.rdma_devices]
    for dev in devices:
        port = cm.get((dev, 1))
        if port is None:
            v.absent(cm_read, f"{dev}: RDMA CM defaults never set (kernel default ToS 0)")
            continue
        if port.mode is None or port.tos is None:
            v.unread(cm_read, f"{RDMA_CM_FILE} shows no default_roce_mode/tos of {dev}")
        if port.mode not in (None, ROCE_V2):
            v.problems.append(f"{dev}: RDMA CM default mode {port.mode}, want {ROCE_V2}")
        if port.tos not in (None, tos):
            v.problems.append(f"{dev}: RDMA CM ToS {port.tos}, want {tos} (DSCP {tos >> 2})")
    return v.result(f"RDMA CM RoCE v2, ToS {tos} on {len(devices)} RDMA device(s)")


def check_vf_rails(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """RDM-006: each VF's physfn is the PCI function the profile names for its rail (nics[]
    pci_bus_id, the NIC of nics[].gpu): a rail netdev on another NIC would give its GPU's
    pods VFs that cross the PCIe topology."""
    setup = _setup(ctx, sriov_only=True)
    if isinstance(setup, Result):
        return setup
    v = _Verdict()
    count = 0
    for rail in _rails(evidence, setup[1]):
        want = str(rail.nic.get("pci_bus_id", "")).lower()
        for i, vf in sorted(rail.state.vfs.items()):
            count += 1
            label = f"{rail.nic['netdev']} VF {i} ({vf.address})"
            if vf.physfn is None:
                v.absent(rail.read, f"{label}: no physfn link")
            elif want and vf.physfn.lower() != want:
                v.problems.append(
                    f"{label}: physfn {vf.physfn}, not {want}, the rail NIC of {rail.name}"
                )
    return v.result(f"{count} VF(s), each on its GPU's rail NIC")
