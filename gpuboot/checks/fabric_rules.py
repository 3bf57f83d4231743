"""Interconnect rules: NVLink state and errors, NICs, RoCE QoS, required kernel modules."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from gpuboot.bundle.model import Evidence
from gpuboot.bundle.names import (
    IBSTAT_FILE,
    LSMOD_FILE,
    NVLINK_ERRORS_FILE,
    NVLINK_STATUS_FILE,
    ecn_file,
    mlnx_qos_file,
)
from gpuboot.checks.base import (
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    Result,
    agree,
    forms_in,
    not_applicable,
    parsed,
    probe,
    tool_failure,
)
from gpuboot.checks.smi import gpu_inventory, incomplete, seen_or_unread
from gpuboot.checks.stack_rules import required_modules  # components.yaml's modules
from gpuboot.evidence.forms import parser_of
from gpuboot.evidence.mlnx_qos import MlnxQos, parse_mlnx_qos, unreadable
from gpuboot.evidence.modules import parse_lsmod
from gpuboot.evidence.nvlink import NvlinkErrors
from gpuboot.evidence.roce_ecn import parse_ecn_enable

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


def _nvlink(evidence: Evidence, kind: str):
    """(file, parsed) of the NVLink status or error counters, from ``nvidia-smi nvlink`` or
    ``dcgmi nvlink`` (whichever held; where both are, they must agree on which links are
    down, or which carry errors, per GPU)."""
    found = forms_in(evidence, kind)
    if not found:
        want = NVLINK_STATUS_FILE if kind == "nvlink_s" else NVLINK_ERRORS_FILE
        raise MissingEvidence(f"probe {want} was not collected", where=want)
    views = [(n, parsed(parser_of(kind, form), _read(evidence, n))) for n, form, _o in found]
    if len(views) > 1:
        agree(f"NVLink {'state' if kind == 'nvlink_s' else 'error'}", [
            (n, {g.index: _link_view(kind, g) for g in p.gpus}) for n, p in views
        ])  # fmt: skip
    return views[0]


def _link_view(kind: str, g) -> tuple[int, ...]:
    if kind == "nvlink_s":
        return () if g.mig_mode_unsupported else tuple(sorted(g.inactive_links))
    return tuple(sorted(link for link, c in g.counters.items() if any(c.values())))


def _covers_every_gpu(evidence: Evidence, name: str, listed: int) -> str | None:
    """What a per-GPU listing lacks against every GPU the node counts (lost ones included)."""
    have = gpu_inventory(evidence)
    if have is not None and listed < have:
        return f"{name} lists {listed} of the node's {have} GPUs"
    return None


def check_nvlink_links(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    if int(ctx.hardware["nvlink"]["links_per_gpu"]) == 0:
        return not_applicable("no NVLink on this SKU")
    name, status = _nvlink(evidence, "nvlink_s")
    gaps = [_covers_every_gpu(evidence, name, len(status.gpus) + len(status.lost))]
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
            gaps.append(f"no state for GPU {g.index} link(s) {','.join(map(str, missing))}")
        slow = [
            f"{lk.link} at {lk.speed_gbytes_s:g}"
            for lk in g.links
            if lk.active and lk.speed_gbytes_s and lk.speed_gbytes_s < speed * SPEED_TOLERANCE
        ]
        if down:
            problems.append(f"GPU {g.index}: link(s) {','.join(map(str, down))} inactive")
        if slow:
            problems.append(f"GPU {g.index}: link(s) {', '.join(slow)} GB/s, want {speed:g}")
    gap = "; ".join(g for g in gaps if g) or None
    if problems or gap:  # a link down is seen even in a listing cut short
        return seen_or_unread(problems, gap, name)
    note = f"{len(want)} link(s) per GPU up at {speed:g} GB/s"
    if mig:
        note += f"; GPU {','.join(map(str, mig))} in MIG mode (NVLink not queryable, unused)"
    return Result("PASS", note)


def check_nvlink_errors(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    if int(ctx.hardware["nvlink"]["links_per_gpu"]) == 0:
        return not_applicable("no NVLink on this SKU")
    name, errors = _nvlink(evidence, "nvlink_e")
    gaps = [_covers_every_gpu(evidence, name, len(errors.gpus) + len(errors.lost))]
    if not errors.elided:
        gaps.append(_counters_cut(errors))
    bad = [f"GPU {bus} lost: its error counters cannot be read" for bus in errors.lost]
    for g in errors.gpus:
        for link, counters in sorted(g.counters.items()):
            nonzero = {k: v for k, v in counters.items() if v}
            if nonzero:
                text = ", ".join(f"{k}={v}" for k, v in sorted(nonzero.items()))
                bad.append(f"GPU {g.index} link {link}: {text}")
    return seen_or_unread(bad, "; ".join(g for g in gaps if g) or None, name)


def _counters_cut(errors: NvlinkErrors) -> str | None:
    """Every GPU block lists the same links and counters as the first: nvidia-smi prints
    them all for each GPU, so a block with fewer (or none and no message) was cut off."""
    blocks = [g for g in errors.gpus if g.counters or not g.messages]
    if not blocks:
        return None
    want = {link: set(c) for link, c in blocks[0].counters.items()}
    for g in blocks:
        got = {link: set(c) for link, c in g.counters.items()}
        if not want or got != want:
            return f"{NVLINK_ERRORS_FILE} stops inside GPU {g.index}'s counters"
    return None


def _needs_ofed(ctx: NodeContext) -> str | None:
    if not ctx.hardware["nics"]:
        return "no RDMA NIC on this SKU"
    if not ctx.enabled("doca_ofed_enabled"):
        return "the host's stack does not install DOCA-OFED"
    return None


@dataclass(frozen=True)
class _Port:
    """One NIC port as any of ibstat / ibstatus / ibv_devinfo / rdma link shows it (None: not
    shown)."""

    device: str
    port: int
    ca_type: str | None  # "MT4129"; ibstatus does not print it
    active: bool
    link_up: bool | None
    rate: float | None  # Gb/s; default ibv_devinfo does not print it
    link_layer: str | None


def _nic_ports(form: str, text: str) -> tuple[_Port, ...]:
    parse = parser_of("nics", form)
    if form == "ibstat":
        stat = parsed(parse, text)  # PCI-002 reads it too
        if stat.errors:
            raise ProbeFailed(f"ibstat reported: {stat.errors[0]}")
        return tuple(
            _Port(ca.name, p.port, ca.ca_type, p.state == "Active",
                  p.physical_state == "LinkUp", p.rate_gbits_s, p.link_layer)
            for ca in stat.cas
            for p in ca.ports
        )  # fmt: skip
    if form == "ibstatus":
        return tuple(
            _Port(p.device, p.port, None, (p.state or "").upper() == "ACTIVE",
                  None if p.phys_state is None else p.phys_state == "LinkUp",
                  p.rate_gbits_s, p.link_layer)
            for p in parse(text)
        )  # fmt: skip
    if form == "rdma link":
        return tuple(
            _Port(p.device, p.port, None, p.active,
                  None if p.physical_state is None else p.physical_state == "LINK_UP",
                  None, None)
            for p in parse(text)
        )  # fmt: skip
    return tuple(
        _Port(d.hca_id, p.port, f"MT{d.vendor_part_id}" if d.vendor_part_id else None,
              p.state == "PORT_ACTIVE", _ibv_link_up(p.fields), _ibv_rate(p.fields),
              p.link_layer)
        for d in parse(text)
        for p in d.ports
    )  # fmt: skip


_IBV_SPEED = {"2.5": 2.5, "5.0": 5, "10.0": 10, "14.0": 14, "25.0": 25, "50.0": 50, "100.0": 100}


def _ibv_link_up(fields: dict[str, str]) -> bool | None:
    phys = fields.get("phys_state")  # ibv_devinfo -v: "LINK_UP (5)"
    return None if phys is None else phys.split()[0] == "LINK_UP"


def _ibv_rate(fields: dict[str, str]) -> float | None:
    """ibv_devinfo -v: active_width "4X (2)" x active_speed "100.0 Gbps (64)"."""
    width, speed = fields.get("active_width", ""), fields.get("active_speed", "")
    w = re.match(r"(\d+)X", width)
    sp = re.match(r"([\d.]+)\s*Gbps", speed)
    return int(w.group(1)) * float(sp.group(1)) if w and sp else None


# A file of one device ("ibv_devinfo_-d_mlx5_0.txt", "ibstat_mlx5_0.txt") shows that one only.
_ONE_DEVICE = re.compile(r"_(?:-d_)?(mlx\d+_\d+|ibp\w+)")


def check_nics(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """Every profile NIC port Active/LinkUp at its rate, from ibstat, ibstatus, ibv_devinfo or
    `rdma link` (whichever the evidence holds; where two show the same port they must agree).
    Ports are matched by (CA type, rate) counts, not names: mlx5_N numbering differs between
    chassis, and extra ports (frontend Ethernet) are not the compute fabric. A form that does
    not print the CA type (ibstatus, rdma link) or the rate (ibv_devinfo without -v, rdma
    link) is judged on what it prints."""
    if why := _needs_ofed(ctx):
        return not_applicable(why)
    found = forms_in(evidence, "nics")
    if not found:
        raise MissingEvidence(f"probe {IBSTAT_FILE} was not collected", where=IBSTAT_FILE)
    views = []
    for name, form, out in found:
        if why := tool_failure(form, out):
            raise ProbeFailed(why, where=name)
        try:
            views.append((name, parsed(_nic_ports, form, out.stdout)))
        except ProbeFailed as exc:
            raise ProbeFailed(exc.message, where=name) from None
    _ports_agree(views)
    name, ports = views[0]
    nics = ctx.hardware["nics"]
    if _ONE_DEVICE.search(name):  # a per-device listing judges the profile's NICs it shows
        shown = {p.device for p in ports}
        nics = [n for n in nics if n["hca"] in shown]
        if not nics:
            raise MissingEvidence(
                f"not judged: partial evidence, {name} shows no NIC of the profile", where=name
            )
    want = Counter((n["ca_type"], int(n["rate"])) for n in nics)
    problems = []
    for (ca_type, rate), count in sorted(want.items()):
        cands = [p for p in ports if p.ca_type in (None, ca_type)]
        good = [
            p.device
            for p in cands
            if p.active and p.link_up is not False and p.rate in (None, rate)
        ]
        if len(good) < count:
            bad = [
                f"{p.device} {'Active' if p.active else 'not active'}"
                + ("" if p.link_up is None else f"/{'LinkUp' if p.link_up else 'link down'}")
                + f" rate {p.rate if p.rate is None else f'{p.rate:g}'}"
                for p in cands
                if p.device not in good
            ]
            problems.append(
                f"{len(good)} of {count} {ca_type} ports Active at {rate} Gb/s"
                + (f" ({'; '.join(bad)})" if bad else "")
                + (f" [{name}]" if len(views) > 1 else "")
            )
    return "; ".join(problems) or None


def _ports_agree(views: list[tuple[str, tuple[_Port, ...]]]) -> None:
    """Two forms showing the same port must agree on its state and (where both print it)
    rate."""
    if len(views) < 2:
        return
    seen = [{(p.device, p.port): p for p in ports} for _n, ports in views]
    common = set(seen[0]).intersection(*seen[1:])
    view = [
        (name, {k: (s[k].active, s[k].rate if all(x[k].rate for x in seen) else None)
                for k in sorted(common)})
        for (name, _p), s in zip(views, seen, strict=True)
    ]  # fmt: skip
    agree("NIC port", view)


def roce_rails(ctx: NodeContext) -> list[dict] | Result:
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
    eth = roce_rails(ctx)
    if isinstance(eth, Result):
        return eth
    trust = str(ctx.var("gpuboot_roce_trust", "dscp"))
    prios = _roce_priorities(ctx)
    problems = []
    for nic in eth:
        name = mlnx_qos_file(nic["netdev"])
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
    """Cut short (or not mlnx_qos's): the same test the roce_qos module applies."""
    if why := unreadable(qos):
        raise incomplete(f"{name} is cut short or unreadable: {why}", name)


def check_roce_ecn(evidence: Evidence, ctx: NodeContext) -> str | Result | None:
    """DCQCN on the RoCE priorities: the NIC answers CE marks with CNPs (notification
    point) and slows down on CNPs (reaction point); without it the switch's ECN marking
    is ignored and only PFC pauses are left."""
    eth = roce_rails(ctx)
    if isinstance(eth, Result):
        return eth
    prios = _roce_priorities(ctx)
    problems, gaps, where = [], [], ""
    for nic in eth:
        name = ecn_file(nic["netdev"])
        switches = parse_ecn_enable(_read(evidence, name))
        if any(k not in switches for k in ECN_SWITCHES):
            gaps.append(f"{name} lists {len(switches)} of the port's 16 ECN switches")
            where = where or name
        off = [  # a switch the file shows off; one it does not show is unknown, not off
            f"{proto} {prio}"
            for prio in prios
            for proto in ("roce_np", "roce_rp")
            if switches.get((proto, prio)) is False
        ]
        if off:
            problems.append(f"{nic['netdev']} ECN off on {', '.join(off)}")
    return seen_or_unread(problems, "; ".join(gaps) or None, where)


def check_modules(evidence: Evidence, ctx: NodeContext) -> str | None:
    out = probe(evidence, LSMOD_FILE)
    if why := tool_failure("lsmod", out):
        raise ProbeFailed(why, where=LSMOD_FILE)
    loaded = parse_lsmod(out.stdout)
    missing = [m for m in required_modules(ctx) if m not in loaded]
    return f"not loaded: {', '.join(missing)}" if missing else None
