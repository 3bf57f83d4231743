"""Helpers for the emulator tests: a node root in a tmp dir and a runner for its shims."""

from __future__ import annotations

import importlib
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpuboot.profiles import load_profile
from tests.paths import REPO

GPUEMU = REPO / "gpuboot_lab" / "emulator" / "gpuemu"
DRIVER = "550.54.15"


@dataclass
class Result:
    rc: int
    out: str
    err: str


class EmuNode:
    """One emulated node living under ``root`` (GPUEMU_ROOT)."""

    def __init__(self, root: Path, profile: str):
        self.root = root
        self.profile = load_profile(profile)
        etc = root / "etc" / "gpuemu"
        etc.mkdir(parents=True)
        (etc / "profile.json").write_text(json.dumps(self.profile))

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["GPUEMU_ROOT"] = str(self.root)
        return env

    def run(self, tool: str, *args: str, check: bool = False) -> Result:
        proc = subprocess.run(
            [sys.executable, str(GPUEMU), tool, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        res = Result(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return res

    def popen(self, tool: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(GPUEMU), tool, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def install_module(self, name: str, version: str = DRIVER, **extra: str) -> None:
        mods = self.root / "lib" / "modules" / "gpuemu"
        mods.mkdir(parents=True, exist_ok=True)
        lines = [f"version={version}", f"description={name} module"]
        lines += [f"{k}={v}" for k, v in extra.items()]
        (mods / f"{name}.ko").write_text("\n".join(lines) + "\n")

    def install_userspace(self, component: str, version: str) -> None:
        d = self.root / "usr" / "lib" / "gpuemu" / "userspace"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{component}.version").write_text(version + "\n")

    def install_driver(self, version: str = DRIVER, flavor: str = "open") -> None:
        """What the lab's driver packages leave behind (kernel modules + NVML)."""
        self.install_module("nvidia", version, flavor=flavor)
        self.install_module("nvidia-uvm", version, depends="nvidia")
        self.install_module("nvidia-modeset", version, depends="nvidia")
        self.install_userspace("nvml", version)

    def status(self) -> dict:
        return json.loads(self.run("ctl", "status", check=True).out)

    def read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text()

    def exists(self, path: str) -> bool:
        return (self.root / path.lstrip("/")).exists()


def make_node(tmp_path: Path, profile: str = "hgx-h100-sxm-8gpu", driver: bool = True) -> EmuNode:
    node = EmuNode(tmp_path / "node", profile)
    if driver:
        node.install_driver()
    node.run("ctl", "setup", check=True)
    return node


class Daemon:
    """A shim daemon (nv-fabricmanager, nvidia-persistenced, nv-hostengine -n) for a test."""

    def __init__(self, node: EmuNode, tool: str, key: str, *args: str):
        self.node, self.key = node, key
        self.proc = node.popen(tool, *args)
        for _ in range(200):
            if node.status()["daemons"][key] or self.proc.poll() is not None:
                break
            time.sleep(0.05)

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=10)

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def emulator_module(name: str):
    """One of the emulator's modules, imported in this process. The emulator is not a
    package of the project but code the lab runs inside nodes, whose modules import each
    other as ``emu``: its directory goes on the path here, the one place a test does so."""
    if str(GPUEMU.parent) not in sys.path:
        sys.path.insert(0, str(GPUEMU.parent))
    return importlib.import_module(f"emu.{name}")
