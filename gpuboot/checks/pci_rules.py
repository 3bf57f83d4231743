"""PCI-002: device counts from the PCI bus (as gpud does), against what the drivers see and
what the profile expects.

The bus enumerates a device whatever its driver makes of it, so a GPU that the driver could
not bring up (RmInitAdapter failed, a bad board) is on the bus but missing from nvidia-smi,
and a ConnectX function whose mlx5 device never appeared is on the bus but missing from
ibstat: each is named by its bus address. A part the profile counts that is absent from the
bus (and so from the driver) is named by the profile's address when it gives one. NVSwitches
enumerate as NVIDIA "other bridge" functions (class 0680), never as GPUs.

A GPU the driver lost after bring-up ("Unable to determine the device handle") is GPU-001's
finding; it counts as seen here. An lspci listing that cannot be read is ERROR.
"""

from __future__ import annotations

import re
from collections import Counter

from gpuboot.bundle.model import Evidence
from gpuboot.bundle.names import IBSTAT_FILE
from gpuboot.bundle.names import LSPCI_GPU_FILE as GPU_FILE
from gpuboot.bundle.names import LSPCI_NIC_FILE as NIC_FILE
from gpuboot.checks.base import (
    MissingEvidence,
    NodeContext,
    ProbeFailed,
    forms_in,
    parsed,
    tool_failure,
)
from gpuboot.checks.smi import gpu_table
from gpuboot.errors import ParseError
from gpuboot.evidence import lspci
from gpuboot.evidence.forms import parser_of

_VENDOR_ONLY = re.compile(r"-d_([0-9a-fA-F]{0,4}):")


def bus_functions(evidence: Evidence, vendor: str) -> dict[str, lspci.PciFunction] | None:
    """``vendor``'s functions by address from every lspci listing in the evidence that covers
    it (``-d V:`` of another vendor does not); None when no listing covers it."""
    found: dict[str, lspci.PciFunction] | None = None
    for name, _form, out in forms_in(evidence, "lspci"):
        m = _VENDOR_ONLY.search(name)
        if m and m.group(1) and m.group(1).lower() != vendor:
            continue
        # lspci ends every line; a node always has the profile's GPUs on its bus (or GPU-001
        # fails): a listing cut mid-line or empty is not an answer to trust
        if not out.stdout.strip() or not out.stdout.endswith("\n"):
            why = "listed nothing" if not out.stdout.strip() else "cut short (no final newline)"
            raise ProbeFailed(f"{name}: lspci {why}", where=name)
        try:
            funcs = parsed(lspci.parse_lspci, out.stdout)
        except ParseError as exc:
            raise ProbeFailed(f"{name}: {exc}", where=name) from None
        found = found or {}
        found.update({f.address: f for f in funcs if f.vendor == vendor})
    return found


def _listing(evidence: Evidence, vendor: str, file: str) -> dict[str, lspci.PciFunction]:
    funcs = bus_functions(evidence, vendor)
    if funcs is None:
        raise MissingEvidence(f"probe {file} was not collected", where=file)
    return funcs


def _gpus(evidence: Evidence, ctx: NodeContext) -> list[str]:
    gpu = ctx.hardware["gpu"]
    on_bus = lspci.gpus(tuple(_listing(evidence, lspci.NVIDIA, GPU_FILE).values()))
    failure, rows, lost = gpu_table(evidence)
    if failure and not lost:  # no driver to ask (not loaded, mismatched): STK-001/GPU-001's
        raise ProbeFailed(f"cannot ask the driver which GPUs it sees: {failure}")
    seen = {lspci.bus_address(str(r.text("pci.bus_id"))) for r in rows if r.text("pci.bus_id")}
    seen |= {lspci.bus_address(pci) for pci, _ in lost}
    problems = [
        f"GPU {f.address} ({f.ids}) on the PCI bus, invisible to the driver (not in nvidia-smi)"
        for f in on_bus
        if f.address not in seen
    ]
    expected = int(gpu["count"])
    if len(on_bus) < expected:
        addresses = {f.address for f in on_bus}
        named = [
            a for a in map(lspci.bus_address, gpu.get("pci_bus_ids") or []) if a not in addresses
        ]
        what = f"GPU {', '.join(named)}" if named else "GPUs"
        problems.append(
            f"{len(on_bus)} of {expected} GPUs on the PCI bus: {what} absent from the bus "
            "and the driver"
        )
    switches = int(ctx.hardware["nvlink"].get("nvswitch_count", 0) or 0)
    have = lspci.nvswitches(tuple(_listing(evidence, lspci.NVIDIA, GPU_FILE).values()))
    if len(have) < switches:
        problems.append(f"{len(have)} of {switches} NVSwitches on the PCI bus (class 0680)")
    return problems


def _nics(evidence: Evidence, ctx: NodeContext) -> list[str]:
    nics = ctx.hardware["nics"]
    if not nics:
        return []
    on_bus = lspci.connectx(tuple(_listing(evidence, lspci.MELLANOX, NIC_FILE).values()))
    by_type: dict[str, list[lspci.PciFunction]] = {}
    for f in on_bus:
        by_type.setdefault(lspci.ca_type(f), []).append(f)
    problems = []
    want = Counter(str(n["ca_type"]) for n in nics)
    for ca_type, count in sorted(want.items()):
        have = {f.address for f in by_type.get(ca_type, [])}
        if len(have) < count:
            named = [
                f"{n['hca']} ({lspci.bus_address(str(n['pci_bus_id']))})"
                for n in nics
                if n["ca_type"] == ca_type and lspci.bus_address(str(n["pci_bus_id"])) not in have
            ]
            problems.append(
                f"{len(have)} of {count} {ca_type} NICs on the PCI bus"
                + (f": {', '.join(named)} absent from the bus and the driver" if named else "")
            )
    if not ctx.enabled("doca_ofed_enabled"):
        return problems  # no RDMA stack asked for: ibstat is not collected, nobody to ask
    out = evidence.get(IBSTAT_FILE)
    if out is None:
        raise MissingEvidence(f"probe {IBSTAT_FILE} was not collected", where=IBSTAT_FILE)
    if why := tool_failure(IBSTAT_FILE, out):  # not declared: without OFED it may fail
        raise ProbeFailed(why)
    stat = parsed(parser_of("nics", "ibstat"), out.stdout)  # NIC-001 reads it too
    if stat.errors:
        raise ProbeFailed(f"ibstat reported: {stat.errors[0]}", where=IBSTAT_FILE)
    cas = {ca.name: ca for ca in stat.cas}
    for ca_type, funcs in sorted(by_type.items()):
        seen = [name for name, ca in cas.items() if ca.ca_type == ca_type]
        if len(funcs) <= len(seen):
            continue
        # ibstat prints no PCI address: the profile's hca -> address names the missing one
        named = [
            f"{n['hca']} ({lspci.bus_address(str(n['pci_bus_id']))})"
            for n in nics
            if n["ca_type"] == ca_type
            and n["hca"] not in cas
            and lspci.bus_address(str(n["pci_bus_id"])) in {f.address for f in funcs}
        ]
        where = ", ".join(named) or ", ".join(f.address for f in funcs)
        problems.append(
            f"{len(funcs)} {ca_type} function(s) on the PCI bus, ibstat sees {len(seen)}: "
            f"{len(funcs) - len(seen)} invisible to the driver ({'of ' if not named else ''}"
            f"{where})"
        )
    return problems


def check_pci_devices(evidence: Evidence, ctx: NodeContext) -> str | None:
    problems = _gpus(evidence, ctx) + _nics(evidence, ctx)
    return "; ".join(problems) or None
