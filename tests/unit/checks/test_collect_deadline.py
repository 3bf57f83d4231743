"""One node that never finishes its collection (a tool stuck in the kernel, a hostile
node) is cut off at the controller's deadline: the others' results are kept, and no
process of the cut-off call is left behind."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
import uuid

import pytest

from gpuboot import node_collect as node_fixtures
from gpuboot import remote
from gpuboot.probes import Probe

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

_SSH = "import sys, time; time.sleep(float(sys.argv[1])); print('answered')"


class _Host:
    """testinfra's ssh backend in miniature: a local shell starting a client whose argv
    carries the remote command (as ssh's does); the client takes ``delay`` to answer."""

    def __init__(self, delay: str):
        self.delay = delay

    def run(self, command: str):
        client = shlex.join([sys.executable, "-c", _SSH, self.delay, command])
        return subprocess.run(["sh", "-c", f"{client}; echo done"], capture_output=True, text=True)


def _alive(marker: str) -> str:
    return subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout


def test_a_node_past_its_deadline_is_cut_off_and_its_processes_ended():
    delay = f"{900 + uuid.uuid4().int % 99}.{uuid.uuid4().int % 10**6:06d}"  # unique to us
    started = time.monotonic()
    with pytest.raises(remote.RemoteTimeout, match="collection timed out after 1s"):
        remote.run_with_deadline(_Host(delay), "true", 1, "evidence collection")
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    assert not _alive(delay)


def test_a_node_within_its_deadline_answers_as_before():
    out = remote.run_with_deadline(_Host("0"), "true", 30, "evidence collection")
    assert out.returncode == 0 and out.stdout.split() == ["answered", "done"]


def test_the_deadline_is_the_probes_timeouts_end_to_end_or_the_hosts_own():
    probes = (Probe("a.txt", "a", timeout=120), Probe("b.txt", "b", timeout=30))
    assert node_fixtures.collect_deadline({}, probes) == 150 + node_fixtures.COLLECT_MARGIN_S
    assert node_fixtures.collect_deadline({"gpuboot_collect_timeout": 20}, probes) == 20
    assert node_fixtures.collect_deadline({"gpuboot_collect_timeout": "x"}, probes) > 150
