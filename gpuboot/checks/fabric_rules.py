"""Interconnect rules: NVLink state and errors, NICs, RoCE QoS, required kernel modules."""

from __future__ import annotations

from collections import Counter

from gpuboot.checks.base import (
    NodeContext,
    ProbeFailed,
    Result,
    not_applicable,
    probe,
    tool_failure,
)
from gpuboot.checks.smi import gpu_inventory, incomplete
from gpuboot.collect import Evidence, ecn_file
from gpuboot.evidence.ibstat import parse_ibstat
from gpuboot.evidence.mlnx_qos import MlnxQos, parse_mlnx_qos
from gpuboot.evidence.modules import parse_lsmod
from gpuboot.evidence.nvlink import NvlinkErrors, parse_nvlink_errors, parse_nvlink_status
from gpuboot.evidence.roce_ecn import parse_ecn_enable

NVLINK_S = "nvidia-smi_nvlink_-s.txt"
NVLINK_E = "nvidia-smi_nvlink_-e.txt"
SPEED_TOLERANCE = 0.99  # nvidia-smi rounds link speeds (26.562, 25)
# mlx5 exposes both DCQCN switches for each of the 8 priorities (grep lists all 16)
ECN_SWITCHES = tuple((proto, prio) for proto in ("roce_np", "roce_rp") for prio in range(8))


def _read(evidence: Evidence, name: str) -> str:
    out = probe(evidence, name)
    if not out.stdout.strip() and (why := tool_failure(name, out)):
        raise ProbeFailed(why, where=name)
    return out.stdout


def expected_links(ctx: NodeContext) -> list[int]:
    """Links that must be active per GPU: the profile's list, else all of them. An H100 PCIe
    pair with an NVLink bridge uses 12 of its 18 links by design (links 4,5,10,11,16,17 idle)."""
    nv = ctx.hardware["nvlink"]
    ids = ((ctx.profile.get("thresholds") or {}).get("nvlink") or {}).get("active_links")
    return [int(i) for i in ids] if ids is not None else list(range(int(nv["links_per_gpu"])))


def _covers_every_gpu(evidence: Evidence, name: str, listed: int) -> None:
    """A per-GPU listing must cover every GPU the node counts (lost ones included)."""
    have = gpu_inventory(evidence)
    if have is not None and listed < have:
        raise incomplete(f"{name} lists {listed} of the node's {have} GPUs", name)


def check_nvlink_links(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    if int(ctx.hardware["nvlink"]["links_per_gpu"]) == 0:
        return not_applicable("no NVLink on this SKU")
    status = parse_nvlink_status(_read(evidence, NVLINK_S))
    _covers_every_gpu(evidence, NVLINK_S, len(status.gpus) + len(status.lost))
    want = expected_links(ctx)
    speed = float(ctx.hardware["nvlink"]["link_speed_gbps"])
    problems = [f"GPU {bus} lost: its NVLinks cannot be read" for bus in status.lost]
    mig = []
    for g in status.gpus:
        if g.mig_mode_unsupported:
            mig.append(g.index)  # NVLink is not used by MIG instances and cannot be queried
            continue
        if g.all_links_inactive:
            problems.append(f"GPU {g.index}: all NVLinks inactive")
            continue
        links = {lk.link: lk for lk in g.links}
        down = [i for i in want if i in links and not links[i].active]
        # nvidia-smi lists every link of a GPU, inactive ones too: one not listed is cut off
        missing = [] if status.elided else [i for i in want if i not in links]
        if missing:
            raise incomplete(
                f"{NVLINK_S} lists no state for GPU {g.index} link(s) "
                f"{','.join(map(str, missing))}",
                NVLINK_S,
            )
        slow = [
            f"{lk.link} at {lk.speed_gbytes_s:g}"
            for lk in g.links
            if lk.active and lk.speed_gbytes_s and lk.speed_gbytes_s < speed * SPEED_TOLERANCE
        ]
        if down:
            problems.append(f"GPU {g.index}: link(s) {','.join(map(str, down))} inactive")
        if slow:
            problems.append(f"GPU {g.index}: link(s) {', '.join(slow)} GB/s, want {speed:g}")
    if problems:
        return "; ".join(problems)
    note = f"{len(want)} link(s) per GPU up at {speed:g} GB/s"
    if mig:
        note += f"; GPU {','.join(map(str, mig))} in MIG mode (NVLink not queryable, unused)"
    return Result("PASS", note)


def check_nvlink_errors(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    if int(ctx.hardware["nvlink"]["links_per_gpu"]) == 0:
        return not_applicable("no NVLink on this SKU")
    errors = parse_nvlink_errors(_read(evidence, NVLINK_E))
    _covers_every_gpu(evidence, NVLINK_E, len(errors.gpus) + len(errors.lost))
    if not errors.elided:
        _counters_complete(errors)
    bad = [f"GPU {bus} lost: its error counters cannot be read" for bus in errors.lost]
    for g in errors.gpus:
        for link, counters in sorted(g.counters.items()):
            nonzero = {k: v for k, v in counters.items() if v}
            if nonzero:
                text = ", ".join(f"{k}={v}" for k, v in sorted(nonzero.items()))
                bad.append(f"GPU {g.index} link {link}: {text}")
    return "; ".join(bad) or None


def _counters_complete(errors: NvlinkErrors) -> None:
    """Every GPU block lists the same links and counters as the first: nvidia-smi prints
    them all for each GPU, so a block with fewer (or none and no message) was cut off."""
    blocks = [g for g in errors.gpus if g.counters or not g.messages]
    if not blocks:
        return
    want = {link: set(c) for link, c in blocks[0].counters.items()}
    for g in blocks:
        got = {link: set(c) for link, c in g.counters.items()}
        if not want or got != want:
            raise incomplete(f"{NVLINK_E} stops inside GPU {g.index}'s counters", NVLINK_E)


def _needs_ofed(ctx: NodeContext) -> str | None:
    if not ctx.hardware["nics"]:
        return "no RDMA NIC on this SKU"
    if not ctx.enabled("doca_ofed_enabled"):
        return "the host's stack does not install DOCA-OFED"
    return None


def check_nics(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Every profile NIC port Active/LinkUp at its rate. Ports are matched by (CA type, rate)
    counts, not names: mlx5_N numbering differs between chassis, and extra ports (frontend
    Ethernet) are not the compute fabric."""
    if why := _needs_ofed(ctx):
        return not_applicable(why)
    out = probe(evidence, "ibstat.txt")
    if why := tool_failure("ibstat", out):
        raise ProbeFailed(why, where="ibstat.txt")
    stat = parse_ibstat(out.stdout)
    if stat.errors:
        raise ProbeFailed(f"ibstat reported: {stat.errors[0]}", where="ibstat.txt")
    want = Counter((n["ca_type"], int(n["rate"])) for n in ctx.hardware["nics"])
    problems = []
    for (ca_type, rate), count in sorted(want.items()):
        ports = [(ca, p) for ca in stat.cas if ca.ca_type == ca_type for p in ca.ports]
        good = [
            ca.name
            for ca, p in ports
            if p.state == "Active" and p.physical_state == "LinkUp" and p.rate_gbits_s == rate
        ]
        if len(good) < count:
            bad = [
                f"{ca.name} {p.state}/{p.physical_state} rate {p.rate_gbits_s}"
                for ca, p in ports
                if ca.name not in good
            ]
            problems.append(
                f"{len(good)} of {count} {ca_type} ports Active at {rate} Gb/s"
                + (f" ({'; '.join(bad)})" if bad else "")
            )
    return "; ".join(problems) or None


def _roce_rails(ctx: NodeContext) -> list[dict] | Result:
    """The RoCE (Ethernet) NICs the QoS rules judge, or why they do not apply."""
    if why := _needs_ofed(ctx):
        return not_applicable(why)
    eth = [n for n in ctx.hardware["nics"] if n.get("link_layer") == "Ethernet"]
    return eth or not_applicable("no RoCE (Ethernet) NIC on this SKU")


def _roce_priorities(ctx: NodeContext) -> list[int]:
    """The lossless RoCE priorities (PFC and ECN on them): NVIDIA's RoCE guide uses 3."""
    return sorted(int(p) for p in ctx.var("gpuboot_roce_pfc_priorities", [3]))


def check_roce_qos(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Lossless RoCE: trust DSCP and PFC on exactly the RoCE priority (NVIDIA's RoCE guide
    uses priority 3). Override with gpuboot_roce_trust / gpuboot_roce_pfc_priorities."""
    eth = _roce_rails(ctx)
    if isinstance(eth, Result):
        return eth
    trust = str(ctx.var("gpuboot_roce_trust", "dscp"))
    prios = _roce_priorities(ctx)
    problems = []
    for nic in eth:
        name = f"mlnx_qos_-i_{nic['netdev']}.txt"
        out = probe(evidence, name)
        if why := tool_failure("mlnx_qos", out):
            raise ProbeFailed(why, where=name)
        qos = parse_mlnx_qos(out.stdout)
        _qos_complete(qos, name)
        on = sorted(p for p, e in qos.pfc_enabled.items() if e)
        if qos.trust_state != trust:
            problems.append(f"{nic['netdev']} trust {qos.trust_state}, want {trust}")
        if on != prios:
            problems.append(f"{nic['netdev']} PFC on priorities {on or 'none'}, want {prios}")
    return "; ".join(problems) or None


def _qos_complete(qos: MlnxQos, name: str) -> None:
    """mlnx_qos prints the trust state, PFC for all 8 priorities, then the tc table last:
    output without any of them was cut short (or is not mlnx_qos's)."""
    if qos.trust_state is None or len(qos.pfc_enabled) < 8 or not qos.traffic_classes:
        raise incomplete(f"{name} lacks the trust state, the PFC row or the tc table", name)


def check_roce_ecn(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """DCQCN on the RoCE priorities: the NIC answers CE marks with CNPs (notification
    point) and slows down on CNPs (reaction point); without it the switch's ECN marking
    is ignored and only PFC pauses are left."""
    eth = _roce_rails(ctx)
    if isinstance(eth, Result):
        return eth
    prios = _roce_priorities(ctx)
    problems = []
    for nic in eth:
        name = ecn_file(nic["netdev"])
        switches = parse_ecn_enable(_read(evidence, name))
        if any(k not in switches for k in ECN_SWITCHES):
            raise incomplete(f"{name} lists {len(switches)} of the port's 16 ECN switches", name)
        off = [
            f"{proto} {prio}"
            for prio in prios
            for proto in ("roce_np", "roce_rp")
            if not switches.get((proto, prio), False)
        ]
        if off:
            problems.append(f"{nic['netdev']} ECN off on {', '.join(off)}")
    return "; ".join(problems) or None


def required_modules(ctx: NodeContext) -> list[str]:
    mods = ["nvidia"]
    if ctx.enabled("nvidia_peermem_enabled"):
        mods.append("nvidia_peermem")
    if ctx.enabled("nvidia_fs_enabled"):
        mods.append("nvidia_fs")
    if ctx.hardware["nics"] and ctx.enabled("doca_ofed_enabled"):
        mods.append("mlx5_ib")
    return mods


def check_modules(evidence: Evidence, ctx: NodeContext) -> str | None:
    out = probe(evidence, "lsmod.txt")
    if why := tool_failure("lsmod", out):
        raise ProbeFailed(why, where="lsmod.txt")
    loaded = parse_lsmod(out.stdout)
    missing = [m for m in required_modules(ctx) if m not in loaded]
    return f"not loaded: {', '.join(missing)}" if missing else None
