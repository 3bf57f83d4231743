#!/usr/bin/env python3
"""gpuboot benchmarks on a 10-node lab, each figure as a ratio to a baseline measured
in the same run (absolute seconds depend on the machine; ratios travel).

  lab up (10 nodes, image cached)       seconds (and per node)
  gpuboot certify  / ansible -m ping    one evidence round trip per node vs. Ansible's minimum
  certify --probes none / ansible -m ping   the same without bandwidth probes (target: <= 2x)
  install first: controller CPU per node  user+sys of gpuboot and its children / nodes
  install first CPU / Ansible's floor    the same, vs. a play of as many `command: true` tasks
                                        per node as the converge had task results
  certify --probes none: controller CPU per node  the same for certify
  install no-op    / ansible -m setup   a converged re-run vs. plain fact gathering
  install no-op    / install first      the same, vs. converging the 550 stack from scratch
  install --full   / install first      a re-run that runs every role (no fingerprint skip)
  evaluate (1000 nodes) / reading them  offline judging vs. just reading the evidence
  inventory load (1000 hosts)           controller CPU of reading and checking the inventory,
                                        which every verb does once: in all and per host

Usage: .venv/bin/python bench/bench.py [--nodes 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from gpuboot import paths  # noqa: E402
from gpuboot.runner import ansible_env, close_ssh_masters, config_env, control_dir  # noqa: E402
from gpuboot_lab import lab as labmod  # noqa: E402

CPU: dict[str, float] = {}  # command label -> controller CPU seconds (user+sys, children included)


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU[" ".join(cmd[3:5])] = cpu
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        raise SystemExit(f"bench: {' '.join(cmd[:3])} failed with exit {proc.returncode}")
    return elapsed, proc.stdout


def ansible_floor(inv: str, tasks: int, env: dict[str, str], scratch: Path) -> float:
    """Controller CPU per node of a play of ``tasks`` trivial module runs per node
    (`command: true`, no facts), with gpuboot's Ansible settings: what Ansible itself costs
    for that many task results (a forked worker, an ssh exec and the result's handling
    each), whatever the tasks do. install's first converge is judged against it."""
    play = scratch / "floor.yml"
    steps = [{"name": f"floor {i}", "ansible.builtin.command": "true"} for i in range(tasks)]
    play.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": steps}]))
    # Its own ssh masters, closed after: the ping and setup baselines below open theirs.
    cp_dir = scratch / "cp-floor"
    env = {**env, **config_env(scratch), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp_dir)}
    try:
        timed(["ansible-playbook", "-i", inv, str(play)], env)
    finally:
        close_ssh_masters(cp_dir)
    return CPU[str(play)]


def evaluate_throughput(bundle: Path, out: Path, hosts: int, rounds: int = 3) -> dict[str, float]:
    """`evaluate` on a bundle of ``hosts`` nodes (copies of the lab's real evidence),
    against the baseline of merely reading those files. Both are timed ``rounds`` times,
    alternating, and each keeps its best: other work on the two cores (the lab's teardown
    just before) stretches a single timing by 10-20%, and either side alike."""
    from gpuboot.bundle.manifest import write_manifest
    from gpuboot.bundle.store import read_host_bundle
    from gpuboot.certify import evaluate_bundle

    sources = sorted(p for p in bundle.iterdir() if p.is_dir())
    for i in range(hosts):
        shutil.copytree(sources[i % len(sources)], out / f"gpu{i:04d}")
    write_manifest(out, "bench", {})  # as certify leaves it: evaluate verifies every hash
    host_dirs = sorted(p for p in out.iterdir() if p.is_dir())
    reads, evaluates = [], []
    for _ in range(rounds):
        started = time.monotonic()
        for host_dir in host_dirs:
            read_host_bundle(host_dir)
        reads.append(time.monotonic() - started)
        started = time.monotonic()
        report = evaluate_bundle(str(out))
        evaluates.append(time.monotonic() - started)
        assert len(report.nodes) == hosts
    return {
        "evaluate_1000_s": min(evaluates),
        "read_1000_s": min(reads),
        "evaluate_1000_worst_s": max(evaluates),
        "read_1000_worst_s": max(reads),
        "evaluate_nodes_per_s": hosts / min(evaluates),
    }


def fleet_inventory(hosts: int, domains: int = 4) -> dict[str, Any]:
    """An inventory of ``hosts`` GPU nodes on one profile and stack, spread over
    ``domains`` domains with one executor each: a fleet no lab here can hold."""
    nodes = {
        f"gpu{i:05d}": {
            "ansible_host": f"10.{1 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}",
            "gpuboot_domain": f"hall-{i % domains}",
        }
        for i in range(hosts)
    }
    executors = {
        f"ex{i}": {"ansible_host": f"10.0.0.{i + 1}", "gpuboot_executor_domains": [f"hall-{i}"]}
        for i in range(domains)
    }
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "gpuboot_profile": "hgx-h100-sxm-8gpu",
                "gpuboot_stack": "lts-550-cuda12.4",
            },
            "hosts": nodes,
            "children": {"gpuboot_executors": {"hosts": executors}},
        }
    }


def inventory_load(scratch: Path, hosts: int = 1000, rounds: int = 3) -> dict[str, float]:
    """CPU of `load_inventory` (every verb's first step on the controller) on a generated
    inventory of ``hosts`` nodes, the best of ``rounds``: the first pays the imports. A
    cost per host that a 10-node lab hides is plain at 1,000."""
    import yaml

    from gpuboot.inventory import load_inventory

    path = scratch / "fleet-inventory.yml"
    path.write_text(yaml.safe_dump(fleet_inventory(hosts)))
    cpu = []
    for _ in range(rounds):
        started = time.process_time()
        inv = load_inventory(path)
        cpu.append(time.process_time() - started)
        assert len(inv.views) == hosts
    return {
        "inventory_load_hosts": hosts,
        "inventory_load_cpu_s": min(cpu),
        "inventory_load_cpu_per_host_ms": 1000 * min(cpu) / hosts,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--stack", default="lts-550-cuda12.4")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    gpuboot = [sys.executable, "-m", "gpuboot.cli"]
    name = f"bench-{uuid.uuid4().hex[:6]}"
    paths.put_venv_on_path()
    scratch = Path(tempfile.mkdtemp(prefix="gpuboot-bench-"))
    cp_dir = control_dir(scratch)
    env = {**os.environ, **ansible_env(scratch)}

    from gpuboot_lab.image import ensure_image
    from gpuboot_lab.repo_server import ensure_repo

    ensure_image()
    ensure_repo()
    results: dict[str, float] = {"load_1min_at_start": os.getloadavg()[0]}
    started = time.monotonic()
    lab = labmod.up(name, args.nodes, "hgx-h100-sxm-8gpu", stack=args.stack)
    results["lab_up_s"] = time.monotonic() - started
    inv = str(lab.inventory)
    try:
        try:
            results["install_first_s"], out = timed(
                [*gpuboot, "install", "-i", inv, "-q", "--json"]
            )
            results["install_first_cpu_per_node_s"] = CPU["install -i"] / args.nodes
            hosts = json.loads(out)["hosts"].values()
            tasks = round(sum(h["ok"] + h["skipped"] + h["failed"] for h in hosts) / len(hosts))
            results["install_first_tasks_per_node"] = tasks
            results["ansible_floor_cpu_per_node_s"] = (
                ansible_floor(inv, tasks, env, scratch) / args.nodes
            )
            results["install_noop_s"], _ = timed([*gpuboot, "install", "-i", inv, "-q"])
            results["install_full_s"], _ = timed([*gpuboot, "install", "-i", inv, "-q", "--full"])
            results["ansible_setup_s"], _ = timed(["ansible", "all", "-i", inv, "-m", "setup"], env)
            results["ansible_ping_s"], _ = timed(["ansible", "all", "-i", inv, "-m", "ping"], env)
            none = [*gpuboot, "certify", "-i", inv, "-q", "--probes", "none"]
            results["certify_none_s"], _ = timed(none)
            results["certify_none_cpu_per_node_s"] = CPU["certify -i"] / args.nodes
            started = time.monotonic()
            cert = subprocess.run(
                [*gpuboot, "certify", "-i", inv, "-q", "--json"], capture_output=True, text=True
            )
            results["certify_s"] = time.monotonic() - started
            results["certify_exit"] = cert.returncode
            bundle = Path(json.loads(cert.stdout)["bundle"])
        finally:
            close_ssh_masters(cp_dir)
            labmod.down(name)
        # offline judging: measured after the lab is down, its ten nodes' services stopped
        results.update(evaluate_throughput(bundle, scratch / "big", hosts=1000))
        results.update(inventory_load(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # Other work on the machine stretches every wall time (and the CPU figures less so):
    # the report says how loaded it was.
    results["load_1min_at_end"] = os.getloadavg()[0]
    ratios = {
        "evaluate / read (1000 nodes)": results["evaluate_1000_s"] / results["read_1000_s"],
        "certify / ansible ping": results["certify_s"] / results["ansible_ping_s"],
        "certify --probes none / ansible ping": results["certify_none_s"]
        / results["ansible_ping_s"],
        "install no-op / ansible setup": results["install_noop_s"] / results["ansible_setup_s"],
        "install no-op / install first": results["install_noop_s"] / results["install_first_s"],
        "install --full / install first": results["install_full_s"] / results["install_first_s"],
        "install first CPU / Ansible floor": results["install_first_cpu_per_node_s"]
        / results["ansible_floor_cpu_per_node_s"],
    }
    if args.json:
        print(json.dumps({"nodes": args.nodes, "seconds": results, "ratios": ratios}, indent=2))
        return 0
    print(f"nodes: {args.nodes}, stack {args.stack}")
    print(
        f"lab up:              {results['lab_up_s']:6.1f} s "
        f"({results['lab_up_s'] / args.nodes:.2f} s/node, image cached)"
    )
    for key in (
        "install_first_s",
        "install_noop_s",
        "install_full_s",
        "ansible_setup_s",
        "ansible_ping_s",
        "certify_s",
        "certify_none_s",
        "install_first_cpu_per_node_s",
        "ansible_floor_cpu_per_node_s",
        "certify_none_cpu_per_node_s",
        "evaluate_1000_s",
        "read_1000_s",
        "evaluate_1000_worst_s",
        "read_1000_worst_s",
    ):
        print(f"{key[:-2].replace('_', ' '):<20} {results[key]:6.1f} s")
    print(f"evaluate throughput   {results['evaluate_nodes_per_s']:6.0f} nodes/s")
    print(
        f"inventory load        {results['inventory_load_cpu_s']:6.2f} s CPU for "
        f"{results['inventory_load_hosts']:.0f} hosts "
        f"({results['inventory_load_cpu_per_host_ms']:.2f} ms/host)"
    )
    print(
        f"load (1 min) at start {results['load_1min_at_start']:.1f}, "
        f"at end {results['load_1min_at_end']:.1f} (2 cores)"
    )
    for label, ratio in ratios.items():
        print(f"{label:<30} {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
