"""Run gpuboot's real collection script against an emulated node on this machine.

The emulator's shims are put on PATH under their tool names (as the lab's packages do),
so the evidence has exactly the emulator's output formats, without podman.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuboot.bundle.model import Evidence
from gpuboot.checks.base import NodeContext
from gpuboot.collect import script, state_probes, unpack
from gpuboot.probes import node_probes
from tests.unit.gpuboot_lab._emu import GPUEMU, Daemon, EmuNode, make_node

TOOLS = (
    "nvidia-smi", "dmesg", "lsmod", "ibstat", "mlnx_qos", "ib_write_bw", "nvbandwidth",
    "all_reduce_perf", "dcgmi", "lspci", "show_gids", "ethtool", "rdma",
)  # fmt: skip
STACK_VARS = {
    "nvidia_driver_branch": "550",
    "nvidia_driver_version": "550.54.15-1",
    "cuda_toolkit_version": "12.4.1-1",
    "dcgm_version": "1:3.3.9",
    "doca_ofed_enabled": True,
    "nvidia_fabricmanager_enabled": True,
    "nvidia_peermem_enabled": False,
}


def full_node(tmp: Path, profile: str = "hgx-h100-sxm-8gpu") -> EmuNode:
    """A node with driver, fabric manager, DCGM and OFED installed, QoS set for RoCE."""
    n = make_node(tmp, profile)
    n.install_userspace("fabricmanager", "550.54.15")
    n.install_userspace("dcgm", "3.3.9")
    for m in ("ib_core", "mlx5_core", "mlx5_ib", "ib_uverbs"):
        n.install_module(m, "24.10-1.1.4")
    n.run("ctl", "boot", "--force", check=True)
    for nic in n.profile["hardware"]["nics"]:
        n.run("mlnx_qos", "-i", nic["netdev"], "--trust", "dscp", "--pfc", "0,0,0,1,0,0,0,0")
        if nic["link_layer"] == "Ethernet":
            set_ecn(n, nic["netdev"], "1")
    return n


def set_ecn(node: EmuNode, netdev: str, value: str, prio: int = 3) -> None:
    """What `echo VALUE > /sys/class/net/NETDEV/ecn/roce_{np,rp}/enable/PRIO` does."""
    for proto in ("roce_np", "roce_rp"):
        path = node.root / f"run/gpuemu/sys/class/net/{netdev}/ecn/{proto}/enable/{prio}"
        path.write_text(value + "\n")


def collect(
    node: EmuNode, tmp: Path, level: str = "quick", drop: tuple[str, ...] = (), **extra
) -> Evidence:
    """The evidence certify collects from this node for a host with STACK_VARS + ``extra``."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in TOOLS:
        link = bindir / tool
        if tool not in drop and not link.exists():
            link.write_text(f'#!/bin/sh\nexec {sys.executable} {GPUEMU} {tool} "$@"\n')
            link.chmod(0o755)
        elif tool in drop and link.exists():
            link.unlink()
    env = {**node.env, "PATH": f"{bindir}:/usr/bin:/bin"}
    sysroot = node.root / "run" / "gpuemu"
    profile, hostvars = node.profile, {**STACK_VARS, **extra}
    bandwidth = node_probes(profile, hostvars, level)
    state = state_probes(profile, hostvars)
    text = script(str(sysroot / "proc"), str(sysroot / "sys"), state, bandwidth)
    # no systemd here: answer the fabric manager probe from the emulator's own state
    text = text.replace("systemctl is-active nvidia-fabricmanager", _fm_state(node))
    # A lab node's container sees only its own processes; this node shares the host's, so
    # the probe pre-condition looks in the script's own session only (not at the probe
    # tools a lab test runs on this host at the same time). The daemons the emulator
    # tracks by PID stay visible (a PID namespace would hide them). No bandwidth probe, no
    # pre-condition to look for.
    assert ("pgrep -x" in text) == bool(bandwidth)
    text = text.replace("pgrep -x", "pgrep -s 0 -x")
    out = subprocess.run(
        ["sh", "-c", text],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert out.returncode == 0, out.stderr
    return unpack(out.stdout.strip(), state, bandwidth)


def _fm_state(node: EmuNode) -> str:
    running = node.status()["daemons"].get("fabricmanager")
    return "echo active" if running else "echo inactive; exit 3"


def ctx(node: EmuNode, level: str = "quick", **extra) -> NodeContext:
    return NodeContext("emu", node.profile, {**STACK_VARS, **extra}, {"probes": level})


def dpkg_line(version: str = "550.54.15-1") -> str:
    return f"nvidia-fabricmanager-550\t{version}\tii \nnvidia-utils-550\t{version}\tii \n"


__all__ = ["Daemon", "EmuNode", "collect", "ctx", "dpkg_line", "full_node", "os", "set_ecn"]
