"""``nvidia-smi -q`` (text, also ``-q -d SECTION`` subsets) and ``nvidia-smi -q -x`` (XML).

Both formats yield the same ``NvidiaSmiQ``. Every leaf is also kept in ``GpuInfo.fields``
under its path ("PCI/GPU Link Info/PCIe Generation/Max" for text, "pci/pci_gpu_link_info/
pcie_gen/max_link_gen" for XML) so a check can read fields this module does not name.
Author elisions (``[...]``) set ``elided``: absent sections are then unknown, not healthy.
XML element names follow NVIDIA's nvsmi_device_v*.dtd (clocks_throttle_* in older drivers,
clocks_event_* since R535).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from gpuboot.errors import ParseError
from gpuboot.evidence._common import (
    ELISION,
    NA_WORDS,
    clean,
    require_text,
    snake,
    to_bool,
    to_float,
    to_int,
)

TOOL = "nvidia-smi -q"
TOOL_X = "nvidia-smi -q -x"


@dataclass(frozen=True)
class EccCounts:
    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None  # parity + SEC-DED where the driver splits them
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None
    correctable_total: int | None = None
    uncorrectable_total: int | None = None


@dataclass(frozen=True)
class RetiredPages:
    single_bit: int | None
    double_bit: int | None
    pending: bool | None


@dataclass(frozen=True)
class RemappedRows:
    correctable: int | None
    uncorrectable: int | None
    pending: bool | None  # a remap waits for a GPU reset
    failure: bool | None
    histogram: dict[str, int | None] = field(default_factory=dict)  # max/high/partial/low/none


@dataclass(frozen=True)
class MigDevice:
    index: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None
    name: str | None
    type: str | None
    used_memory_mib: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class GpuInfo:
    bus_id: str
    product_name: str | None = None
    uuid: str | None = None
    persistence_mode: bool | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_gen_host_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    ecc_mode_current: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_volatile: EccCounts | None = None
    ecc_aggregate: EccCounts | None = None
    sram_threshold_exceeded: bool | None = None
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None  # None: not reported (absent, N/A, or MIG)
    clock_event_reasons_active: tuple[str, ...] | None = None  # snake names, e.g. "hw_slowdown"
    temperature_gpu_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None
    recovery_action: str | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    elided: bool = False
    fields: dict[str, str | None] = field(default_factory=dict)

    @property
    def remap_pending(self) -> bool:
        return bool(self.remapped_rows and self.remapped_rows.pending)


@dataclass(frozen=True)
class NvidiaSmiQ:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    timestamp: str | None
    gpus: tuple[GpuInfo, ...]
    elided: bool = False
    # what the output lacks against what was asked (set by the rules' completeness check,
    # gpuboot.checks.smi, never by the parser): its GPUs are read, a fault they show counts
    incomplete: str | None = None
    asked: int | None = None  # GPUs a `-i`/`--id` run asked for (None: all attached)


# ---------------------------------------------------------------- text format


class _Node:
    """One line of the text tree. A node's children are looked up ~50 times per GPU (every
    field GpuInfo names): by a lower-cased index built on the first lookup, not a scan."""

    __slots__ = ("_index", "children", "key", "value")

    def __init__(self, key: str, value: str | None) -> None:
        self.key = key
        self.value = value
        self.children: list[_Node] = []
        self._index: dict[str, tuple[int, _Node]] | None = None

    def _child(self, part: str) -> _Node | None:
        index = self._index
        if index is None:
            index = self._index = {}
            for i, c in enumerate(self.children):
                index.setdefault(c.key.lower(), (i, c))  # the first child of a name
        if "|" not in part:
            hit = index.get(part.lower())
            return hit[1] if hit else None
        hits = [index[n] for n in part.lower().split("|") if n in index]
        return min(hits, key=lambda h: h[0])[1] if hits else None  # first in the text

    def get(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for part in path:  # alternatives across driver versions: "A|B"
            if node is None:
                return None
            node = node._child(part)
        return node

    def val(self, *path: str) -> str | None:
        node = self.get(*path)
        return clean(node.value) if node is not None else None


_GPU_HDR = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def _key_value(stripped: str) -> tuple[str, str | None]:
    """(key, value) of a stripped line; value None: no "key : value" line. The key ends at
    the first colon (not the line's first character) followed by a space or the line's end,
    so "a:b : c" has the key "a:b". String methods, not a regex: a lazy group before a
    trailing ``\\s*$`` retried at every character of a long run of spaces."""
    i = stripped.find(":", 1)
    while i > 0:
        if i + 1 == len(stripped) or stripped[i + 1].isspace():
            return stripped[:i].rstrip(), stripped[i + 1 :].strip()
        i = stripped.find(":", i + 1)
    return stripped, None


def _tree(text: str) -> tuple[_Node, list[_Node], set[int], bool, list[dict[str, str | None]]]:
    """The indentation tree, its GPU nodes, which GPU blocks (and whether the header) hold
    an elision, and each GPU's leaves by path (first value of a path wins), in one pass.
    A -q of 8 GPUs is ~1,600 lines read once per node: the loop keeps to cheap str methods
    and three parallel stacks (indent, node, path below its GPU or None outside one)."""
    root = _Node("", None)
    gpus: list[_Node] = []
    fields: list[dict[str, str | None]] = []
    elided_gpus: set[int] = set()
    elided_top = False
    indents: list[int] = [-1]
    nodes: list[_Node] = [root]
    paths: list[str | None] = [None]
    out: dict[str, str | None] = {}
    if "\t" in text:
        text = text.expandtabs(8)
    for raw in text.splitlines():
        body = raw.lstrip()
        if not body:
            continue
        stripped = body.rstrip()
        first = stripped[0]
        if first == "=" and stripped.startswith("====="):
            continue
        indent = len(raw) - len(body)
        if first == "[" and ELISION.match(stripped):
            if gpus:
                elided_gpus.add(len(gpus) - 1)
            else:
                elided_top = True
            continue
        if not indent and first == "G" and (header := _GPU_HDR.match(stripped)):
            node = _Node("GPU", header.group(1))
            root.children.append(node)
            gpus.append(node)
            out = {}
            fields.append(out)
            indents, nodes, paths = [-1, 0], [root, node], [None, ""]
            continue
        i = stripped.find(":")  # _key_value's common case inline
        if i > 0 and (i + 1 == len(stripped) or stripped[i + 1].isspace()):
            key, value = stripped[:i].rstrip(), stripped[i + 1 :].lstrip()
        else:
            key, value = _key_value(stripped)
        while indents[-1] >= indent:
            indents.pop()
            nodes.pop()
            paths.pop()
        node = _Node(key, value)
        nodes[-1].children.append(node)
        prefix = paths[-1]
        path = None
        if prefix is not None:
            path = prefix + "/" + key if prefix else key
            if value is not None and path not in out:
                out[path] = clean(value) if value[:1] == "[" or value.lower() in NA_WORDS else value
        indents.append(indent)
        nodes.append(node)
        paths.append(path)
    return root, gpus, elided_gpus, elided_top, fields


def _ecc_text(node: _Node | None) -> EccCounts | None:
    if node is None or not node.children:
        return None
    if node.get("Single Bit") is not None:  # pre-Ampere layout: per-unit counters + Total
        ce, ue = to_int(node.val("Single Bit", "Total")), to_int(node.val("Double Bit", "Total"))
        return EccCounts(correctable_total=ce, uncorrectable_total=ue)
    sram_ue = to_int(node.val("SRAM Uncorrectable"))
    parity = to_int(node.val("SRAM Uncorrectable Parity"))
    secded = to_int(node.val("SRAM Uncorrectable SEC-DED"))
    if sram_ue is None and (parity is not None or secded is not None):
        sram_ue = (parity or 0) + (secded or 0)
    return _ecc(
        to_int(node.val("SRAM Correctable")),
        sram_ue,
        to_int(node.val("DRAM Correctable")),
        to_int(node.val("DRAM Uncorrectable")),
    )


def _ecc(sc: int | None, su: int | None, dc: int | None, du: int | None) -> EccCounts:
    def total(*vals: int | None) -> int | None:
        known = [v for v in vals if v is not None]
        return sum(known) if known else None

    return EccCounts(sc, su, dc, du, total(sc, dc), total(su, du))


_REASON_ALIASES = {"gpu_idle": "idle", "display_clocks_setting": "display_clock_setting"}


def _reasons_text(node: _Node | None) -> tuple[str, ...] | None:
    if node is None or not node.children:
        return None
    active: list[str] = []

    def walk(n: _Node) -> None:
        for c in n.children:
            if to_bool(c.value) is True and clean(c.value) and c.value.strip().lower() == "active":
                name = snake(c.key)
                active.append(_REASON_ALIASES.get(name, name))
            walk(c)

    walk(node)
    return tuple(active)


def _processes_text(node: _Node | None) -> tuple[GpuProcess, ...]:
    if node is None:
        return ()
    procs: list[GpuProcess] = []
    gi = ci = None
    for c in node.children:
        k = c.key.lower()
        if k == "gpu instance id":
            gi = to_int(c.value)
        elif k == "compute instance id":
            ci = to_int(c.value)
        elif k == "process id":
            procs.append(
                GpuProcess(
                    to_int(c.value),
                    c.val("Name"),
                    c.val("Type"),
                    to_int(c.val("Used GPU Memory")),
                    gi,
                    ci,
                )
            )
    return tuple(procs)


def _gpu_from_text(node: _Node, elided: bool, fields: dict[str, str | None]) -> GpuInfo:
    link = node.get("PCI", "GPU Link Info")
    rp, rr = node.get("Retired Pages"), node.get("Remapped Rows")
    retired = None
    if rp is not None and rp.children:
        retired = RetiredPages(
            to_int(rp.val("Single Bit ECC")),
            to_int(rp.val("Double Bit ECC")),
            to_bool(rp.val("Pending Page Blacklist|Pending Page Retirement|Pending")),
        )
    remapped = None
    if rr is not None and rr.children:
        hist = rr.get("Bank Remap Availability Histogram")
        remapped = RemappedRows(
            to_int(rr.val("Correctable Error")),
            to_int(rr.val("Uncorrectable Error")),
            to_bool(rr.val("Pending")),
            to_bool(rr.val("Remapping Failure Occurred")),
            {snake(c.key): to_int(c.value) for c in hist.children} if hist else {},
        )
    power = node.get("GPU Power Readings|Power Readings")
    migs = tuple(
        MigDevice(
            to_int(c.val("Index")),
            to_int(c.val("GPU Instance ID")),
            to_int(c.val("Compute Instance ID")),
        )
        for c in node.children
        if c.key.lower() == "mig device"
    )
    return GpuInfo(
        bus_id=node.value or "",
        product_name=node.val("Product Name"),
        uuid=node.val("GPU UUID"),
        persistence_mode=to_bool(node.val("Persistence Mode")),
        mig_mode_current=to_bool(node.val("MIG Mode", "Current")),
        mig_mode_pending=to_bool(node.val("MIG Mode", "Pending")),
        pcie_gen_current=to_int(link.val("PCIe Generation", "Current")) if link else None,
        pcie_gen_max=to_int(link.val("PCIe Generation", "Max")) if link else None,
        pcie_gen_host_max=to_int(link.val("PCIe Generation", "Host Max")) if link else None,
        pcie_width_current=to_int(link.val("Link Width", "Current")) if link else None,
        pcie_width_max=to_int(link.val("Link Width", "Max")) if link else None,
        pcie_replays=to_int(node.val("PCI", "Replays Since Reset")),
        ecc_mode_current=to_bool(node.val("ECC Mode", "Current")),
        ecc_mode_pending=to_bool(node.val("ECC Mode", "Pending")),
        ecc_volatile=_ecc_text(node.get("ECC Errors", "Volatile")),
        ecc_aggregate=_ecc_text(node.get("ECC Errors", "Aggregate")),
        sram_threshold_exceeded=to_bool(
            node.val("ECC Errors", "Aggregate", "SRAM Threshold Exceeded")
        ),
        retired_pages=retired,
        remapped_rows=remapped,
        clock_event_reasons_active=_reasons_text(
            node.get("Clocks Event Reasons|Clocks Throttle Reasons")
        ),
        temperature_gpu_c=to_float(node.val("Temperature", "GPU Current Temp")),
        power_draw_w=to_float(power.val("Power Draw|Average Power Draw")) if power else None,
        power_limit_w=to_float(power.val("Current Power Limit|Enforced Power Limit|Power Limit"))
        if power
        else None,
        fabric_state=node.val("Fabric", "State"),
        fabric_status=node.val("Fabric", "Status"),
        recovery_action=node.val("GPU Recovery Action"),
        mig_devices=migs,
        processes=_processes_text(node.get("Processes")),
        elided=elided,
        fields=fields,
    )


def parse_nvidia_smi_q(text: str) -> NvidiaSmiQ:
    require_text(TOOL, text)
    if text.lstrip().startswith("<"):
        return parse_nvidia_smi_q_xml(text)
    root, gpus, elided_gpus, elided_top, fields = _tree(text)
    if not gpus:
        raise ParseError(
            TOOL, "no 'GPU <bus id>' section found", hint="is this nvidia-smi -q output?"
        )
    return NvidiaSmiQ(
        driver_version=root.val("Driver Version"),
        cuda_version=root.val("CUDA Version"),
        attached_gpus=to_int(root.val("Attached GPUs")),
        timestamp=root.val("Timestamp"),
        gpus=tuple(_gpu_from_text(g, i in elided_gpus, fields[i]) for i, g in enumerate(gpus)),
        elided=bool(elided_gpus) or elided_top,
    )


# ---------------------------------------------------------------- XML format


def _x(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    for alt in path.split("|"):
        found = el.find(alt)
        if found is not None:
            return clean(found.text)
    return None


def _ecc_xml(el: ET.Element | None) -> EccCounts | None:
    if el is None or len(el) == 0:
        return None
    if el.find("single_bit") is not None:
        return EccCounts(
            correctable_total=to_int(_x(el, "single_bit/total")),
            uncorrectable_total=to_int(_x(el, "double_bit/total")),
        )
    sram_ue = to_int(_x(el, "sram_uncorrectable"))
    parity, secded = (
        to_int(_x(el, "sram_uncorrectable_parity")),
        to_int(_x(el, "sram_uncorrectable_secded")),
    )
    if sram_ue is None and (parity is not None or secded is not None):
        sram_ue = (parity or 0) + (secded or 0)
    return _ecc(
        to_int(_x(el, "sram_correctable")),
        sram_ue,
        to_int(_x(el, "dram_correctable")),
        to_int(_x(el, "dram_uncorrectable")),
    )


def _flatten_xml(el: ET.Element, prefix: str, out: dict[str, str | None]) -> None:
    for c in el:
        path = f"{prefix}/{c.tag}" if prefix else c.tag
        if len(c) == 0 and path not in out:
            out[path] = clean(c.text)
        _flatten_xml(c, path, out)


def _gpu_from_xml(g: ET.Element) -> GpuInfo:
    fields: dict[str, str | None] = {}
    _flatten_xml(g, "", fields)
    link = g.find("pci/pci_gpu_link_info")
    rp, rr = g.find("retired_pages"), g.find("remapped_rows")
    retired = None
    if rp is not None and len(rp):
        retired = RetiredPages(
            to_int(_x(rp, "multiple_single_bit_retirement/retired_count")),
            to_int(_x(rp, "double_bit_retirement/retired_count")),
            to_bool(_x(rp, "pending_retirement|pending_blacklist")),
        )
    remapped = None
    if rr is not None and len(rr):
        hist = rr.find("row_remapper_histogram")
        remapped = RemappedRows(
            to_int(_x(rr, "remapped_row_corr")),
            to_int(_x(rr, "remapped_row_unc")),
            to_bool(_x(rr, "remapped_row_pending")),
            to_bool(_x(rr, "remapped_row_failure")),
            {c.tag.removeprefix("row_remapper_histogram_"): to_int(c.text) for c in hist}
            if hist is not None
            else {},
        )
    reasons_el = g.find("clocks_event_reasons")
    if reasons_el is None:
        reasons_el = g.find("clocks_throttle_reasons")
    reasons = None
    if reasons_el is not None and len(reasons_el):
        reasons = []
        for c in reasons_el:
            if (clean(c.text) or "").lower() == "active":
                name = re.sub(r"^clocks_(?:event|throttle)_reason_", "", c.tag)
                reasons.append(_REASON_ALIASES.get(name, name))
        reasons = tuple(reasons)
    power = g.find("gpu_power_readings")
    if power is None:
        power = g.find("power_readings")
    migs = tuple(
        MigDevice(
            to_int(_x(m, "index")),
            to_int(_x(m, "gpu_instance_id")),
            to_int(_x(m, "compute_instance_id")),
        )
        for m in g.findall("mig_devices/mig_device")
    )
    procs = tuple(
        GpuProcess(
            to_int(_x(p, "pid")),
            _x(p, "process_name"),
            _x(p, "type"),
            to_int(_x(p, "used_memory")),
            to_int(_x(p, "gpu_instance_id")),
            to_int(_x(p, "compute_instance_id")),
        )
        for p in g.findall("processes/process_info")
    )
    return GpuInfo(
        bus_id=g.get("id") or _x(g, "pci/pci_bus_id") or "",
        product_name=_x(g, "product_name"),
        uuid=_x(g, "uuid"),
        persistence_mode=to_bool(_x(g, "persistence_mode")),
        mig_mode_current=to_bool(_x(g, "mig_mode/current_mig")),
        mig_mode_pending=to_bool(_x(g, "mig_mode/pending_mig")),
        pcie_gen_current=to_int(_x(link, "pcie_gen/current_link_gen")),
        pcie_gen_max=to_int(_x(link, "pcie_gen/max_link_gen")),
        pcie_gen_host_max=to_int(_x(link, "pcie_gen/max_host_link_gen")),
        pcie_width_current=to_int(_x(link, "link_widths/current_link_width")),
        pcie_width_max=to_int(_x(link, "link_widths/max_link_width")),
        pcie_replays=to_int(_x(g, "pci/replay_counter")),
        ecc_mode_current=to_bool(_x(g, "ecc_mode/current_ecc")),
        ecc_mode_pending=to_bool(_x(g, "ecc_mode/pending_ecc")),
        ecc_volatile=_ecc_xml(g.find("ecc_errors/volatile")),
        ecc_aggregate=_ecc_xml(g.find("ecc_errors/aggregate")),
        sram_threshold_exceeded=to_bool(_x(g, "ecc_errors/aggregate/sram_threshold_exceeded")),
        retired_pages=retired,
        remapped_rows=remapped,
        clock_event_reasons_active=reasons,
        temperature_gpu_c=to_float(_x(g, "temperature/gpu_temp")),
        power_draw_w=to_float(_x(power, "power_draw|average_power_draw")),
        power_limit_w=to_float(_x(power, "current_power_limit|enforced_power_limit|power_limit")),
        fabric_state=_x(g, "fabric/state"),
        fabric_status=_x(g, "fabric/status"),
        recovery_action=_x(g, "gpu_recovery_action"),
        mig_devices=migs,
        processes=procs,
        fields=fields,
    )


def parse_nvidia_smi_q_xml(text: str) -> NvidiaSmiQ:
    require_text(TOOL_X, text)
    # The DOCTYPE names an external DTD; ElementTree never fetches it.
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise ParseError(TOOL_X, f"not well-formed XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(TOOL_X, f"root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus = root.findall("gpu")
    if not gpus:
        raise ParseError(TOOL_X, "no <gpu> element")
    return NvidiaSmiQ(
        driver_version=_x(root, "driver_version"),
        cuda_version=_x(root, "cuda_version"),
        attached_gpus=to_int(_x(root, "attached_gpus")),
        timestamp=_x(root, "timestamp"),
        gpus=tuple(_gpu_from_xml(g) for g in gpus),
    )
