"""Scan history after a year of scheduled scans: size and per-scan read time, before
(every record kept, read twice a scan: the scan's fold and the trend page) and after
compaction (gpuboot.scan.History: read once; between the compacted size and about twice it).

Synthetic: NODES nodes with 8 GPUs each, SCANS hourly scans, hardware faults on some boots
(a boot lasts 100 scans), a rule failing now and then, one bandwidth-measuring scan in 500.
The full uncompacted file would be gigabytes: its size and read time are extrapolated
linearly from a SAMPLE-scan slice written and read for real (a read parses every line).
The compacted file is the fold of every one of the SCANS x NODES records, written and read.

    .venv/bin/python bench/scan_history.py [--nodes 1000] [--scans 10000] [--sample 100]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuboot import scan

T0 = datetime(2025, 11, 24, tzinfo=UTC)
GPUS = [f"0000:{b:02x}:00" for b in range(0x18, 0x20)]


def record(node: int, i: int) -> dict:
    boot = i // 100
    faults = []
    if node % 10 == 0 and boot % 3 != 1:
        faults.append(f"xid:79@{GPUS[node % 8]}")
    if node % 25 == 0 and i % 7 == 0:
        faults.append(f"remap-failure@{GPUS[2]}")
    failing = {"NVL-001": "FAIL"} if (i // 50 + node) % 40 == 0 else {}
    if i % 97 == node % 97:
        failing["STK-002"] = "ERROR"
    return {
        "time": (T0 + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "run_id": f"{i:08d}-certify-abcdef",
        "inventory": "/etc/gpuboot/site.yml",
        "host": f"node{node:04d}",
        "verdict": "FAIL" if failing else "PASS",
        "failing": failing,
        "new": [],
        "boot_id": f"6f1c1a7e-0b2d-4c1e-9d7a-{node:06d}{boot:06d}",
        "faults": faults,
        "escalated": faults if boot > 3 else [],
        "gpus": {
            g: f"GPU-{node:04d}{j:02d}-7f3e-4b9a-8c21-5d6e7f809a1b" for j, g in enumerate(GPUS)
        },
        "figures": {"nvbandwidth_h2d": [55.1 + node % 3, "GB/s", 40.0]} if i % 500 == 0 else {},
    }


def scan_lines(nodes: int, i: int) -> bytes:
    return b"".join(json.dumps(record(n, i), sort_keys=True).encode() + b"\n" for n in range(nodes))


def timed_read(path: Path, repeat: int = 3) -> float:
    """Best of ``repeat``: open, read and fold the whole file, as a scan does."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        scan.History.parse(path.read_bytes(), path, lambda _m: None)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--scans", type=int, default=10_000)
    ap.add_argument("--sample", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scan-history-") as tmp:
        sample = Path(tmp) / "sample.jsonl"
        with open(sample, "wb") as fh:
            for i in range(args.scans - args.sample, args.scans):
                fh.write(scan_lines(args.nodes, i))
        scale = args.scans / args.sample
        raw_size = sample.stat().st_size * scale
        raw_read = timed_read(sample, repeat=1) * scale
        sample.unlink()

        t = time.perf_counter()
        hist = scan.History()
        per_record = raw_size / (args.scans * args.nodes)
        for i in range(args.scans):
            for n in range(args.nodes):
                hist.add(record(n, i), int(per_record))
        fold_s = time.perf_counter() - t
        path = Path(tmp) / "scan-history.jsonl"
        path.write_bytes(hist.compacted())
        compact_size = path.stat().st_size
        compact_read = timed_read(path)
        # scans append until their records outweigh the compacted ones: the largest file read
        i = args.scans
        with open(path, "ab") as fh:
            while (appended := path.stat().st_size - compact_size) < max(
                compact_size, scan.COMPACT_MIN_BYTES
            ):
                fh.write(scan_lines(args.nodes, i))
                fh.flush()
                i += 1
        peak_size = path.stat().st_size
        peak_read = timed_read(path)
    mb = 1e6
    print(
        f"{args.scans} scans x {args.nodes} nodes (synthetic; fold of every record {fold_s:.0f} s)"
    )
    print(
        f"before: {raw_size / mb:,.0f} MB, read twice a scan: {2 * raw_read:,.1f} s a scan "
        f"(extrapolated from {args.sample} scans)"
    )
    print(
        f"after:  {compact_size / mb:.2f} MB compacted ({compact_size / args.nodes / 1e3:.2f} kB "
        f"a node), read once: {compact_read * 1e3:.0f} ms; at most {peak_size / mb:.2f} MB "
        f"({i - args.scans} scans appended, {appended / mb:.2f} MB) before the next "
        f"compaction: {peak_read * 1e3:.0f} ms"
    )
    print(f"machine load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
