"""A realistic certify report and evidence bundle for the report tests (and the browser test).

The bundle holds real published tool outputs (tests/fixtures/captures) under the file
names certify gives them, plus meta.json and a MANIFEST.json written the way certify does.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "captures"

IB_WRITE_BW = "ib_write_bw/h100-gdr-roce-200g-dmabuf-a-sweep-197gbps.txt"
PROBE_FILES = {
    "nvidia-smi_-q.txt": "nvidia_smi_q/h100-hbm3-8gpu-q-535.183.01.txt",
    "ibstat.txt": "ibstat/h100-roce-8x400g-cx7-plus-4x100g-all-active.txt",
    "nvidia-smi_topo_-m.txt": "topo_m/h100-8gpu-12nic-numa-off-all-node.txt",
    # a full run measures each of the profile's eight rails against a partner
    **{f"ib_write_bw_-d_mlx5_{i}_gpu-b01.txt": IB_WRITE_BW for i in range(8)},
}
NVIDIA_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  "
    "Release Build  (dvs-builder@U16-I3-B03-4-3)  Fri Mar 14 06:19:14 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)
DPKG = (
    "bash\t5.2.21-2ubuntu4\tii \n"
    "cuda-toolkit-12-8\t12.8.1-1\tii \n"
    "doca-ofed\t3.0.0-058000\tii \n"
    "linux-image-6.8.0-60-generic\t6.8.0-60.63\tii \n"
    "nvidia-driver-570-open\t570.133.20-1\tii \n"
    "nvidia-fabricmanager-570\t570.133.20-1\tii \n"
    "nvidia-old-removed\t1.0\trc \n"
    "openssh-server\t1:9.6p1-3ubuntu13\tii \n"
)


def make_bundle(
    root: Path,
    hosts: list[str],
    run_id: str = "20261122T101500-certify-abc123",
    probes: dict[str, str] | None = None,
    level: str = "quick",
    meta: dict[str, Any] | None = None,
) -> Path:
    """Bundle of ``hosts``; ``probes`` (bundle name -> capture path) replaces the default set,
    ``level`` is the probe level meta.json records, ``meta`` adds to each host's meta.json."""
    bundle = root / run_id
    for host in hosts:
        d = bundle / host
        d.mkdir(parents=True)
        for name, rel in (PROBE_FILES if probes is None else probes).items():
            (d / name).write_bytes((CAPTURES / rel).read_bytes())
        (d / "proc_driver_nvidia_version.txt").write_text(NVIDIA_VERSION)
        (d / "dpkg-query_-W.txt").write_text(DPKG)
        doc = {"host": host, "pins": {"gpuboot_profile": "hgx-h100-sxm-8gpu"}, "probes": level}
        (d / "meta.json").write_text(json.dumps({**doc, **(meta or {})}, indent=2, sort_keys=True))
    return write_manifest(bundle, run_id)


def write_manifest(bundle: Path, run_id: str | None = None) -> Path:
    """MANIFEST.json over every file of the bundle, as certify writes it."""
    files = {
        str(p.relative_to(bundle)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(bundle.rglob("*"))
        if p.is_file() and p != bundle / "MANIFEST.json"
    }
    manifest = {"run_id": run_id or bundle.name, "created": "2026-11-22T10:15:00Z", "files": files}
    (bundle / "MANIFEST.json").write_text(json.dumps(manifest, indent=2))
    return bundle


def _m(name: str, value: float | None, unit: str, warn: float, fail: float, limit: float | None):
    m: dict[str, Any] = {
        "name": name,
        "value": value,
        "unit": unit,
        "median_of": 5,
        "samples": [] if value is None else [round(value * f, 2) for f in (0.99, 1.0, 1.01)],
        "warn_below": warn,
        "fail_below": fail,
        "physical_limit": limit,
        "pct_of_limit": None if value is None or not limit else round(100 * value / limit, 1),
        "margin": None if value is None else round(value - fail, 2),  # as checks/thresholds.py
    }
    return m


def _f(rule: str, title: str, status: str = "PASS", reason: str = "ok", action: str = ""):
    return {"rule": rule, "title": title, "status": status, "reason": reason, "action": action}


BASE_RULES = [
    ("STK-001", "driver userspace and kernel module match the pin"),
    ("GPU-001", "GPU count and model as the profile expects"),
    ("GPU-002", "persistence mode enabled on every GPU"),
    ("PCI-001", "PCIe links trained at max generation and width"),
    ("NVL-001", "all NVLink links up at the expected speed"),
    ("XID-001", "no hardware Xid in the kernel log since boot"),
]


def _findings(**override: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for rule, title in BASE_RULES:
        f = _f(rule, title)
        f.update(override.get(rule.replace("-", "_"), {}))
        out.append(f)
    return out


def sample_report(bundle: Path) -> dict[str, Any]:
    """Five nodes: PASS, PASS, WARN, FAIL (NVLink + PCIe), ERROR (probe tool missing)."""
    h2d, d2d = "nvbandwidth host_to_device_memcpy_ce", "nvbandwidth device_to_device_memcpy_read_ce"
    nccl, ib = "all_reduce_perf busbw 8 GiB", "ib_write_bw mlx5_0"

    def ms(a: float | None, b: float | None, c: float | None, d: float | None):
        return [
            _m(h2d, a, "GB/s", 50.0, 40.0, 63.0),
            _m(d2d, b, "GB/s", 350.0, 300.0, 450.0),
            _m(nccl, c, "GB/s", 420.0, 380.0, None),
            _m(ib, d, "Gb/s", 380.0, 350.0, 400.0),
        ]

    nodes = [
        {"host": "gpu-a01", "verdict": "PASS", "findings": _findings(),
         "measurements": ms(55.2, 391.0, 462.5, 392.1)},
        {"host": "gpu-a02", "verdict": "PASS", "findings": _findings(),
         "measurements": ms(54.8, 388.4, 458.0, 391.5)},
        {"host": "gpu-a03", "verdict": "WARN",
         "findings": _findings(GPU_002={
             "status": "WARN", "reason": "persistence mode disabled on GPU 3 (00000000:5D:00.0)",
             "action": "enable persistence mode (nvidia-persistenced) and certify again"}),
         "measurements": ms(47.9, 386.0, 455.1, 389.0)},
        {"host": "gpu-b07.rack2.example.net", "verdict": "FAIL",
         "findings": _findings(
             NVL_001={"status": "FAIL",
                      "reason": "GPU 5: 12 of 18 NVLink links inactive (links 6-17)",
                      "action": "reseat the GPU baseboard; if links stay down, RMA the board"},
             PCI_001={"status": "FAIL",
                      "reason": "GPU 2 (00000000:4C:00.0) trained at Gen3 x16, expected Gen5 x16",
                      "action": "reseat the GPU or riser; check BIOS PCIe settings"}),
         "measurements": ms(12.4, 201.3, 301.0, 388.0)},
        {"host": "gpu-c11", "verdict": "ERROR",
         "findings": _findings(STK_001={
             "status": "ERROR", "reason": "cannot judge: nvbandwidth is not installed (rc 127)",
             "action": "fix the harness or reach the node, then certify again"}),
         "measurements": ms(None, None, None, None)},
    ]  # fmt: skip
    return {
        "run_id": bundle.name,
        "run_dir": str(bundle.parent),
        "bundle": str(bundle),
        "elapsed_s": 184.27,
        "passed": False,
        "nodes": nodes,
    }
