"""NVIDIA daemons and helpers: nv-fabricmanager, nvidia-imex, nv-hostengine (DCGM), nvidia-ctk.

Daemons record their pid in the volatile state; the model treats a live pid as running
(fabric trained, host engine reachable) and rmmod sees the driver held open.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from . import daemon, kmod, model, paths, state
from .state import Node


def _cfg(argv: list[str]) -> dict[str, str]:
    """KEY=VALUE settings of the -c config file (fabric manager, IMEX)."""
    settings: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if arg in ("-c", "--config") and i + 1 < len(argv):
            try:
                with open(paths.p(argv[i + 1]), encoding="utf-8") as fh:
                    for line in fh:
                        key, eq, value = line.strip().partition("=")
                        if eq and not key.startswith("#"):
                            settings[key.strip()] = value.strip()
            except OSError:
                pass
    return settings


# --- nv-fabricmanager ---------------------------------------------------------------------

FM_PIDFILE = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"


def fabricmanager(argv: list[str]) -> int:
    """Forks like the real one (DAEMONIZE defaults to 1; NVIDIA's unit is Type=forking);
    DAEMONIZE=0 in the -c config or --foreground keeps it attached."""
    log = daemon.Logger("nv-fabricmanager")
    fm_version = model.read_userspace("fabricmanager")
    if "-v" in argv or "--version" in argv:
        sys.stdout.write(f"Fabric Manager version is : {fm_version or 'unknown'}\n")
        return 0
    node = state.load()
    sys.stderr.write("Starting NVIDIA Fabric Manager\n")
    driver = model.module_version(node, "nvidia")
    if driver is None:
        log(
            "request to query NVSwitch device information from NVSwitch driver failed with "
            "error:WARNING Nothing to do"
        )
        return 1
    if not int(model.hw(node).get("nvlink", {}).get("nvswitch_count", 0) or 0):
        log("fabric manager: no NVSwitch devices found; this system does not need fabric manager")
        return 1
    if fm_version and fm_version != driver:
        log(
            f"fabric manager NVIDIA GPU driver interface version {fm_version} don't match with "
            f"driver version {driver}. Please update with matching NVIDIA driver package."
        )
        return 1
    if model.faults_of(node, "fabricmanager-fails"):
        log(
            "detected NVSwitch non-fatal error 12028 on NVSwitch pci bus id 00:00000005 "
            "physical id 0x0 port 32"
        )
        log(
            "NVLink training failed: fabric manager failed to configure the NVSwitch fabric; "
            "GPUs will stay in fabric state In Progress"
        )
        return 1

    def start(tx: Node) -> str | None:
        if kmod.pid_alive(tx.vstate.get("fabricmanager_pid")):
            return "another instance of fabric manager is already running"
        return None

    return daemon.run(
        log=log,
        key="fabricmanager_pid",
        pidfile=FM_PIDFILE,
        foreground=_cfg(argv).get("DAEMONIZE", "1") == "0" or "--foreground" in argv,
        start=start,
        stop=lambda tx: None,
        started="Successfully configured all the available GPUs and NVSwitches to route "
        "NVLink traffic.",
        stopped="Fabric Manager stopped",
    )


# --- nvidia-imex ---------------------------------------------------------------------------

IMEX_NODES = "/etc/nvidia-imex/nodes_config.cfg"  # IMEX_NODE_CONFIG_FILE's default


def imex(argv: list[str]) -> int:
    """Forks like the real one (DAEMONIZE defaults to 1; NVIDIA's unit is Type=forking) and
    refuses a loaded driver of another version than its own, as NVIDIA's IMEX guide says the
    daemon does at start; it reads its domain's node list from IMEX_NODE_CONFIG_FILE."""
    log = daemon.Logger("nvidia-imex")
    version = model.read_userspace("imex")
    node = state.load()
    driver = model.module_version(node, "nvidia")
    if driver is None:
        log("failed to initialize: no NVIDIA driver loaded")
        return 1
    if version and version != driver:
        log(
            f"IMEX version {version} is not compatible with the loaded driver version {driver}; "
            "install the IMEX package of the driver's version"
        )
        return 1
    settings = _cfg(argv)
    try:
        with open(
            paths.p(settings.get("IMEX_NODE_CONFIG_FILE", IMEX_NODES)), encoding="utf-8"
        ) as fh:
            peers = [ln.strip() for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
    except OSError as exc:
        log(f"failed to read the node configuration file: {exc.strerror}")
        return 1

    def start(tx: Node) -> str | None:
        if kmod.pid_alive(tx.vstate.get("imex_pid")):
            return "another instance of nvidia-imex is already running"
        tx.vstate["imex_peers"] = peers
        return None

    def stop(tx: Node) -> None:
        tx.vstate.pop("imex_peers", None)

    return daemon.run(
        log=log,
        key="imex_pid",
        pidfile=None,
        foreground=settings.get("DAEMONIZE", "1") == "0" or "--foreground" in argv,
        start=start,
        stop=stop,
        started=f"IMEX service started with {len(peers) or 'no'} peer node(s) configured",
        stopped="IMEX service stopped",
    )


# --- nv-hostengine -------------------------------------------------------------------------

HE_PIDFILE = "/run/nvhostengine.pid"


def dcgm_version() -> str:
    return model.read_userspace("dcgm") or "3.3.9"


def hostengine(argv: list[str]) -> int:
    """`-n` stays attached (the nvidia-dcgm unit); otherwise it forks, as the real one."""
    log = daemon.Logger("nv-hostengine")
    if "-v" in argv or "--version" in argv:
        sys.stdout.write(f"version : {dcgm_version()}\n")
        return 0
    node = state.load()
    if "-t" in argv or "--term" in argv:
        pid = node.vstate.get("hostengine_pid")
        if not kmod.pid_alive(pid):
            sys.stdout.write("Host engine is not running.\n")
            return 255
        os.kill(int(pid), signal.SIGTERM)
        for _ in range(100):
            if not kmod.pid_alive(state.load().vstate.get("hostengine_pid")):
                break
            time.sleep(0.05)
        sys.stdout.write("Host engine successfully terminated.\n")
        return 0
    if kmod.pid_alive(node.vstate.get("hostengine_pid")):
        sys.stdout.write(f"Host engine already running with pid {node.vstate['hostengine_pid']}\n")
        return 255
    foreground = "-n" in argv or "--no-daemon" in argv
    if not foreground:
        sys.stdout.write(f"Started host engine version {dcgm_version()} using port number: 5555 \n")
        sys.stdout.flush()
    return daemon.run(
        log=log,
        key="hostengine_pid",
        pidfile=HE_PIDFILE,
        foreground=foreground,
        start=lambda tx: None,
        stop=lambda tx: None,
        started="Host engine started",
        stopped="Host engine stopped",
    )


# --- nvidia-ctk ----------------------------------------------------------------------------


def ctk(argv: list[str]) -> int:
    version = model.read_userspace("nvidia-container-toolkit") or "1.14.6"
    if not argv or argv[0] in ("-v", "--version"):
        sys.stdout.write(
            f"NVIDIA Container Toolkit CLI version {version}\n"
            "commit: 5605d191332dcfeea802c4497360d60a65c7887e\n"
        )
        return 0
    if argv[:2] == ["runtime", "configure"]:
        runtime = next((a.split("=", 1)[1] for a in argv if a.startswith("--runtime=")), "docker")
        target = {
            "containerd": "/etc/containerd/config.toml",
            "crio": "/etc/crio/crio.conf.d/99-nvidia.conf",
        }.get(runtime, "/etc/docker/daemon.json")
        real = paths.p(target)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        with open(real, "a", encoding="utf-8") as fh:
            fh.write(
                '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
                '  runtime_type = "io.containerd.runc.v2"\n'
                '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
                '    BinaryName = "/usr/bin/nvidia-container-runtime"\n'
            )
        sys.stderr.write(
            f'time="{time.strftime("%Y-%m-%dT%H:%M:%SZ")}" level=info '
            f'msg="Wrote updated config to {target}"\n'
        )
        return 0
    if argv[:2] == ["cdi", "generate"]:
        node = state.load()
        output = next((a.split("=", 1)[1] for a in argv if a.startswith("--output=")), None)
        devices = "".join(
            f'- name: "{g.index}"\n  containerEdits:\n    deviceNodes:\n'
            f"    - path: /dev/nvidia{g.slot}\n"
            for g in model.gpus(node)
        )
        spec = (
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
            + devices
            + "- name: all\n  containerEdits:\n    deviceNodes:\n"
            + "".join(f"    - path: /dev/nvidia{g.slot}\n" for g in model.gpus(node))
        )
        if output:
            state.write_atomic(output, spec)
        else:
            sys.stdout.write(spec)
        return 0
    sys.stderr.write(f"nvidia-ctk: unsupported command in this lab: {' '.join(argv)}\n")
    return 1
