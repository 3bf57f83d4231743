#!/usr/bin/env python3
"""bench.py's `certify --probes none / ansible -m ping` figure alone, on a lab you already
have (converge it first: `gpuboot install -i INV`), run as bench.py runs both commands:
interleaved, median of N, with the load average beside each pair (the machine is shared).

Usage: .venv/bin/python bench/certify_ratio.py INVENTORY [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(1, str(PROJECT))  # after this script's own directory: bench.py, not bench/

from bench import CPU, timed  # noqa: E402 - bench.py's own timing, so the figure is its
from gpuboot import paths  # noqa: E402
from gpuboot.runner import ansible_env, close_ssh_masters, control_dir  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("inventory")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    paths.put_venv_on_path()
    scratch = Path(tempfile.mkdtemp(prefix="gpuboot-bench-"))
    env = {**os.environ, **ansible_env(scratch)}
    gpuboot = [sys.executable, "-m", "gpuboot.cli"]
    runs = []
    try:
        for _ in range(args.runs):
            load = os.getloadavg()[0]
            ping, _ = timed(["ansible", "all", "-i", args.inventory, "-m", "ping"], env)
            none = [*gpuboot, "certify", "-i", args.inventory, "-q", "--probes", "none"]
            certify, _ = timed(none)
            runs.append(
                {"load_1min": load, "ping_s": ping, "certify_none_s": certify,
                 "certify_cpu_s": CPU["certify -i"], "ratio": certify / ping}
            )  # fmt: skip
            if not args.json:
                print(
                    f"load {load:4.1f}  ping {ping:5.2f} s  certify --probes none "
                    f"{certify:5.2f} s (controller CPU {CPU['certify -i']:.2f} s)  "
                    f"{certify / ping:.2f}x",
                    flush=True,
                )
    finally:
        close_ssh_masters(control_dir(scratch))
        shutil.rmtree(scratch, ignore_errors=True)
    median = statistics.median(r["ratio"] for r in runs)
    if args.json:
        print(json.dumps({"runs": runs, "median_ratio": median}, indent=2))
    else:
        print(f"median of {len(runs)}: {median:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
