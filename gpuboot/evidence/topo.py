"""``nvidia-smi topo -m`` / ``topo -mp``: the GPU/NIC connection matrix and affinities.

Handles tab- and space-separated layouts, ANSI underline escapes in the header (tty),
the extra empty cell nvidia-smi prints before "GPU NUMA ID", NIC rows with empty affinity
cells, and the "NIC Legend" block mapping NICn to its device name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuboot.errors import ParseError
from gpuboot.evidence._common import clean, require_text, strip_ansi

TOOL = "nvidia-smi topo -m"

_DEV = re.compile(r"^(GPU|NIC|mlx\S*|NODE|CPU)\d*$")
_NV = re.compile(r"^NV(\d+)$")
_LEGEND = re.compile(r"^\s*(NIC\d+):\s*(\S+)\s*$")


@dataclass(frozen=True)
class TopoRow:
    device: str  # "GPU0", "NIC3"
    links: dict[str, str]  # peer device -> "X", "NV18", "PIX", "NODE", "SYS", ...
    cpu_affinity: str | None
    numa_affinity: str | None
    gpu_numa_id: str | None


@dataclass(frozen=True)
class TopoMatrix:
    devices: tuple[str, ...]
    rows: dict[str, TopoRow]
    nic_names: dict[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[str, ...]:
        return tuple(d for d in self.devices if d.startswith("NIC"))

    def link(self, a: str, b: str) -> str:
        return self.rows[a].links[b]

    def nvlink_count(self, a: str, b: str) -> int | None:
        """Bonded NVLink count between two GPUs (NV12 -> 12), None if not NVLink."""
        m = _NV.match(self.link(a, b))
        return int(m.group(1)) if m else None

    def nics_of(self, gpu: str, kinds: tuple[str, ...] = ("PIX", "PXB")) -> tuple[str, ...]:
        """NICs connected to ``gpu`` by one of ``kinds`` (default: behind the same switch)."""
        return tuple(n for n in self.nics if self.rows[gpu].links.get(n) in kinds)


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return [c.strip() for c in re.split(r"\s{2,}", line)]


def parse_topo_matrix(text: str) -> TopoMatrix:
    require_text(TOOL, text)
    lines = strip_ansi(text).splitlines()
    # The header is the only line that starts blank and names GPU0 (rows start with a name).
    hdr_idx = next(
        (i for i, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln) and ln[:1] in (" ", "\t")),
        None,
    )
    if hdr_idx is None:
        raise ParseError(TOOL, "no matrix header with GPU0", hint="is this topo -m output?")
    header = [c for c in _cells(lines[hdr_idx]) if c]
    devices = [c for c in header if _DEV.match(c)]
    n = len(devices)
    if header[:n] != devices:
        raise ParseError(TOOL, f"unexpected header layout: {header!r}")
    rows: dict[str, TopoRow] = {}
    for ln in lines[hdr_idx + 1 :]:
        if not ln.strip():
            break  # the matrix ends at the first blank line; the legend follows
        cells = _cells(ln)
        name, values = cells[0], cells[1:]
        if name not in devices or len(values) < n:
            raise ParseError(TOOL, f"unreadable matrix row: {ln.strip()[:80]!r}")
        trailing = values[n:]
        rows[name] = TopoRow(
            device=name,
            links=dict(zip(devices, values[:n], strict=True)),
            cpu_affinity=clean(trailing[0]) if trailing else None,
            numa_affinity=clean(trailing[1]) if len(trailing) > 1 else None,
            # nvidia-smi emits an empty cell before GPU NUMA ID: take the last non-empty one.
            gpu_numa_id=next((clean(c) for c in reversed(trailing[2:]) if c), None),
        )
    missing = [d for d in devices if d not in rows]
    if missing:
        raise ParseError(TOOL, f"matrix rows missing for {missing}")
    nic_names = {m.group(1): m.group(2) for ln in lines if (m := _LEGEND.match(ln))}
    return TopoMatrix(devices=tuple(devices), rows=rows, nic_names=nic_names)
