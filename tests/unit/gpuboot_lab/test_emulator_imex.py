"""nvidia-imex in the emulator: it runs only on the driver of its own version, reads its
domain's nodes from the configured node file, forks as NVIDIA's Type=forking unit expects and
stays registered (ctl status) until stopped."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.unit.gpuboot_lab._emu import DRIVER, Daemon, EmuNode, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier


CONFIG = "/etc/nvidia-imex/config.cfg"
NODES = "/etc/nvidia-imex/nodes_config.cfg"
VSTATE = "/run/gpuemu/state.json"  # the emulator's volatile state (emu.paths.VSTATE)


@pytest.fixture
def node(tmp_path) -> EmuNode:
    n = make_node(tmp_path)
    n.install_userspace("imex", DRIVER)
    etc = n.root / "etc" / "nvidia-imex"
    etc.mkdir(parents=True)
    (etc / "config.cfg").write_text(f"SERVER_PORT=50000\nIMEX_NODE_CONFIG_FILE={NODES}\n")
    (etc / "nodes_config.cfg").write_text("# the domain\n10.0.0.1\n10.0.0.2\n")
    return n


def _wait(node: EmuNode, up: bool) -> None:
    for _ in range(100):
        if node.status()["daemons"]["imex"] is up:
            return
        time.sleep(0.05)
    raise AssertionError(f"imex never {'started' if up else 'stopped'}")


def test_runs_on_its_driver_until_stopped(node):
    with Daemon(node, "nvidia-imex", "imex", "-c", CONFIG, "--foreground") as d:
        assert node.status()["daemons"]["imex"] is True
        assert d.stop() == 0
    assert node.status()["daemons"]["imex"] is False


def test_forks_like_the_real_unit_expects(node):
    assert node.run("nvidia-imex", "-c", CONFIG).rc == 0  # DAEMONIZE defaults to 1
    _wait(node, True)
    vstate = json.loads(node.read(VSTATE))
    assert vstate["imex_peers"] == ["10.0.0.1", "10.0.0.2"]
    os.kill(int(vstate["imex_pid"]), signal.SIGTERM)
    _wait(node, False)


def test_refuses_a_driver_of_another_version(node):
    node.install_userspace("imex", "550.127.08")
    res = node.run("nvidia-imex", "-c", CONFIG, "--foreground")
    assert res.rc == 1
    assert "IMEX version 550.127.08 is not compatible with the loaded driver version" in res.err
    assert node.status()["daemons"]["imex"] is False


def test_refuses_without_its_node_file(node):
    (node.root / NODES.lstrip("/")).unlink()
    res = node.run("nvidia-imex", "-c", CONFIG, "--foreground")
    assert res.rc == 1 and "node configuration file" in res.err


def test_refuses_without_a_loaded_driver(tmp_path):
    n = make_node(tmp_path, driver=False)
    n.install_userspace("imex", DRIVER)
    assert n.run("nvidia-imex", "--foreground").rc == 1
