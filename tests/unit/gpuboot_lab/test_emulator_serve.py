"""The warm emulator (emu.serve): a shim hands its call to one interpreter that has the
emulator imported, and the call prints, exits and changes state exactly as the shim run on
its own would (certify's collection runs ~18 shims per node on the controller's cores)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.gpuboot_lab._emu import GPUEMU, EmuNode, Result, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

CLIENT = (
    "import sys; sys.path.insert(0, {emulator!r})\n"
    "from emu.client import call\n"
    "rc = call(sys.argv[1:])\n"
    "sys.exit(99 if rc is None else rc)\n"  # 99: not served (the shim would run it itself)
)


def _served(node: EmuNode, tool: str, *args: str) -> Result:
    """``tool args`` through the warm emulator only (exit 99: it did not serve the call)."""
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT.format(emulator=str(GPUEMU.parent)), tool, *args],
        env=node.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _socket(node: EmuNode) -> Path:
    return node.root / "run/gpuemu/serve.sock"


def _wait_for(path: Path) -> None:
    for _ in range(200):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _stop(node: EmuNode) -> None:
    """End the node's warm emulator (its pid is in its lock file) and wait for it."""
    try:
        pid = int((node.root / "run/gpuemu/serve.lock").read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


@pytest.fixture
def node(tmp_path):
    n = make_node(tmp_path)
    server = n.popen("serve")
    try:
        _wait_for(_socket(n))
        yield n
    finally:
        server.terminate()
        server.wait(timeout=10)


CALLS = [
    ("nvidia-smi", "-L"),
    ("nvidia-smi", "nvlink", "-s"),
    ("nvidia-smi", "topo", "-m"),
    ("nvidia-smi", "--bogus"),  # exit 2 and the real tool's message
    ("lspci", "-n", "-d", "10de:"),
    ("lsmod",),
    ("dmesg",),
    ("ibstat",),
    ("mlnx_qos", "-i", "enp26s0np0"),
    ("mlnx_qos", "-i", "nope"),  # exit 1, stderr
]


@pytest.mark.parametrize("call", CALLS, ids=" ".join)
def test_served_call_prints_and_exits_as_the_shim_run_alone(node, call):
    served, alone = _served(node, *call), node.run(*call)
    assert served.rc != 99, served.err
    assert (served.rc, served.out, served.err) == (alone.rc, alone.out, alone.err)


def test_served_state_changes_are_the_nodes_and_reads_are_fresh(node):
    netdev = "enp26s0np0"
    assert _served(node, "mlnx_qos", "-i", netdev, "--trust", "dscp").rc == 0
    assert "Priority trust state: dscp" in node.run("mlnx_qos", "-i", netdev).out
    node.run("mlnx_qos", "-i", netdev, "--trust", "pcp", check=True)  # behind its back
    assert "Priority trust state: pcp" in _served(node, "mlnx_qos", "-i", netdev).out


def test_probes_and_daemons_are_never_served(node):
    # found by process name (the probe pre-condition) and killed by their caller's timeout
    for tool in ("all_reduce_perf", "nvbandwidth", "ib_write_bw", "dcgmi", "nv-hostengine"):
        assert _served(node, tool, "--help").rc == 99


def test_a_changed_emulator_is_not_served_and_the_server_ends(node):
    source = GPUEMU.parent / "emu" / "lspci.py"
    before = source.stat()
    try:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        assert _served(node, "lsmod").rc == 99
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    for _ in range(200):
        if not _socket(node).exists():
            break
        time.sleep(0.05)
    assert not _socket(node).exists()


def test_no_server_means_not_served_and_nothing_started(tmp_path):
    n = make_node(tmp_path)
    assert _served(n, "lsmod").rc == 99  # a test root never starts one by itself
    assert not _socket(n).exists()


def test_a_started_server_holds_none_of_its_callers_files(tmp_path):
    # The collection script holds the probe lock on an inherited fd while its tools run:
    # a server started from one of them must not keep that lock for its whole life.
    n = make_node(tmp_path)
    probe_lock = tmp_path / "probe.lock"
    code = (
        f"import fcntl, os, sys; sys.path.insert(0, {str(GPUEMU.parent)!r})\n"
        "from emu import client\n"
        f"fd = os.open({str(probe_lock)!r}, os.O_CREAT | os.O_RDWR)\n"
        "os.set_inheritable(fd, True)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "client.spawn()\n"
    )
    try:
        subprocess.run([sys.executable, "-c", code], env=n.env, check=True, timeout=60)
        _wait_for(_socket(n))
        with open(probe_lock, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
        assert _served(n, "lsmod").rc == 0
    finally:
        _stop(n)
