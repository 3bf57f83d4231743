"""`gpuboot plan`'s read (and `matrix import`'s, the same function) through executors.

The same node -- this machine's shell, with a dpkg-query answering a real converged
node's listing -- is read directly (certify's transport) and by a local supervisor running
the shipped collect.yml on itself (the play's connection made local, nothing else
changed): the plans are identical but for who read each host. A host whose executor was
lost, or never answered, is not read, its plan unknown (exit 8), and never read from the
controller instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

from gpuboot import cli, install, paths, transport
from gpuboot.cli.plan import exit_code
from gpuboot.executor import route
from gpuboot.executor.collect_job import PLAYBOOK
from gpuboot.executor.stream import Executor
from gpuboot.inventory import load_inventory
from tests.unit.executor.conftest import REPLAY, python_channel, stream

pytestmark = pytest.mark.subprocess

DPKG = Path(__file__).parents[2] / "fixtures" / "captures" / "dpkg"
CONVERGED = (DPKG / "dpkg-query_-W.converged.txt").read_text()  # lts-550-cuda12.4, real
# one driver package of another build: a change for plan to find
LISTING = CONVERGED.replace("nvidia-utils-550\t550.54.15-1", "nvidia-utils-550\t550.54.14-1")
INVENTORY = """\
all:
  vars: {{gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_stack: lts-550-cuda12.4,
         gpuboot_baseline_manage_kernel: false}}
  children:
    gpu:
      hosts:
        n1: {{ansible_host: 192.0.2.1{n1}}}
        d1: {{ansible_host: 192.0.2.9}}
"""
EXECUTORS = """\
    gpuboot_executors:
      hosts:
        ex-a: {ansible_host: 192.168.0.5, gpuboot_executor_domains: [hall-a]}
"""


def _node_tools(tmp_path: Path) -> str:
    """PATH with this test's dpkg-query (the listing) and dpkg -S owning nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / "listing").write_text(LISTING)
    (bin_dir / "dpkg-query").write_text(f"#!/bin/sh\ncat {tmp_path / 'listing'}\n")
    (bin_dir / "dpkg").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


class ShellHost:
    """A direct read's node: this machine's shell with the node's tools on PATH."""

    def __init__(self, path: str):
        self.env = {"PATH": path}
        self.backend = type("B", (), {"get_hostname": lambda _s: "n1", "NAME": "ssh"})()

    def run(self, command: str) -> CommandResult:
        proc = subprocess.run(["sh", "-c", command], capture_output=True, env=self.env)
        return CommandResult(LocalBackend(), proc.returncode, command, proc.stdout, proc.stderr)


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """(direct inventory, routed inventory: n1 in hall-a with executor ex-a); every
    controller read answered by the node's shell, recorded by host."""
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    path = _node_tools(tmp_path)
    direct = tmp_path / "direct.yml"
    direct.write_text(INVENTORY.format(n1=""))
    routed = tmp_path / "routed.yml"
    routed.write_text(INVENTORY.format(n1=", gpuboot_domain: hall-a") + EXECUTORS)
    connected: list[str] = []

    def connect(name, *_a):
        connected.append(name)
        return ShellHost(path)

    monkeypatch.setattr(transport, "connect", connect)
    plays = tmp_path / "plays"
    plays.mkdir()
    shipped = (paths.PLAYBOOKS_DIR / PLAYBOOK).read_text()
    (plays / PLAYBOOK).write_text(
        shipped.replace("  hosts: all\n", "  hosts: all\n  connection: local\n")
    )
    supervisor = (
        sys.executable,
        "-m",
        "gpuboot.executor.supervisor",
        "--playbooks-dir",
        str(plays),
    )
    local = Executor(
        "ex-a", ("env", f"PATH={path}", *supervisor, "--jobs-dir", str(tmp_path / "j"))
    )
    state = {"direct": direct, "routed": routed, "connected": connected, "executor": local}
    monkeypatch.setattr(route, "executor", lambda _inv, _name: state["executor"])
    return state


def _plan(inv: Path, capsys) -> tuple[int, dict]:
    code = cli.main(["plan", "-i", str(inv), "--json", "-q"])
    return code, json.loads(capsys.readouterr().out)


def _by_host(doc: dict) -> dict[str, dict]:
    return {n["host"]: n for n in doc["nodes"]}


def test_a_hall_host_read_by_its_executor_is_planned_as_a_direct_read(fleet, capsys):
    code, direct = _plan(fleet["direct"], capsys)
    assert sorted(fleet["connected"]) == ["d1", "n1"]
    fleet["connected"].clear()
    routed_code, routed = _plan(fleet["routed"], capsys)
    assert fleet["connected"] == ["d1"]  # n1 was not read from the controller
    assert {h: n["executor"] for h, n in _by_host(routed).items()} == {
        "d1": "controller",
        "n1": "ex-a",
    }
    node = _by_host(routed)["n1"]
    assert node["changes"] == 1, node  # the listing was read, not "not installed"
    (change,) = [i for i in node["items"] if i["action"] != "keep"]
    assert (change["package"], change["current"]) == ("nvidia-utils-550", "550.54.14-1")
    for doc in (direct, routed):
        for n in doc["nodes"]:
            n.pop("executor")
    assert routed == {**direct, "inventory": routed["inventory"]}
    assert routed_code == code == 0


def test_a_lost_executor_leaves_its_hosts_unknown_never_failed(fleet, capsys, monkeypatch):
    cut = fleet["routed"].parent / "cut"
    cut.write_bytes(stream()[:200])  # the worker's first lines, then ssh's 255
    fleet["executor"] = python_channel("ex-a", REPLAY, str(cut), "255")
    monkeypatch.setattr(route, "preflight", lambda _inv, names: dict.fromkeys(names))
    code, doc = _plan(fleet["routed"], capsys)
    nodes = _by_host(doc)
    assert nodes["n1"]["unknown"] is True
    assert nodes["n1"]["error"].startswith("not read: executor ex-a lost: "), nodes["n1"]
    assert nodes["n1"]["executor"] == "ex-a"
    assert "error" not in nodes["d1"] and nodes["d1"]["executor"] == "controller"
    assert fleet["connected"] == ["d1"]
    assert code == 8


def test_an_executor_that_never_answered_reads_none_of_its_hosts(fleet, capsys):
    mute = fleet["routed"].parent / "mute"
    mute.write_bytes(b"")
    fleet["executor"] = python_channel("ex-a", REPLAY, str(mute), "255")
    code, doc = _plan(fleet["routed"], capsys)
    node = _by_host(doc)["n1"]
    assert node["unknown"] is True
    assert node["error"].startswith("not read: no executor of domain hall-a answered"), node
    assert fleet["connected"] == ["d1"]  # never from the controller instead
    assert code == 8
    text = cli.main(["plan", "-i", str(fleet["routed"]), "-q"])
    assert text == 8
    assert "1 not read (1 of them: their executor was lost)" in capsys.readouterr().out


def test_a_node_not_read_on_its_own_account_outranks_an_unknown_one():
    unknown = {"host": "a", "unknown": True, "error": "not read: executor ex-a lost"}
    unreachable = {"host": "b", "unreachable": True, "error": "unreachable: ssh"}
    blocked = {"host": "c", "outside_packages": {"files": [], "driver": None}}
    assert exit_code([unknown]) == 8
    assert exit_code([unknown, unreachable]) == 1
    assert exit_code([unknown, blocked]) == 1
    assert exit_code([{"host": "d", "changes": 0}]) == 0


def test_matrix_import_reads_a_hall_host_through_its_executor(fleet, tmp_path, capsys):
    (tmp_path / "listing").write_text(CONVERGED)  # a node one stack can pin
    written = {}
    for which in ("direct", "routed"):
        out = tmp_path / f"stacks-{which}"
        argv = ["matrix", "import", "-i", str(fleet[which]), "--out", str(out), "--json"]
        code = cli.main([*argv, "--limit", "n1"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0 and not doc["unread"], doc
        (stack,) = doc["stacks"]
        written[which] = Path(stack["file"]).read_text()
    assert fleet["connected"] == ["n1"]  # the direct import's only
    assert written["routed"] == written["direct"]


def test_installs_drain_read_of_a_hall_host_goes_through_its_executor(fleet):
    inv = load_inventory(str(fleet["routed"]))
    assert install.stack_changes(inv, ["n1"]) == ["n1"]  # nvidia-utils-550 changes
    assert fleet["connected"] == []


def test_matrix_import_of_a_host_whose_executor_was_lost_is_unknown(fleet, tmp_path, capsys):
    mute = tmp_path / "mute"
    mute.write_bytes(b"")
    fleet["executor"] = python_channel("ex-a", REPLAY, str(mute), "255")
    out = tmp_path / "stacks"
    argv = ["matrix", "import", "-i", str(fleet["routed"]), "--out", str(out), "--json"]
    code = cli.main([*argv, "--limit", "n1"])
    doc = json.loads(capsys.readouterr().out)
    (unread,) = doc["unread"]
    assert unread["unknown"] is True and unread["executor"] == "ex-a", unread
    assert code == 8 and not doc["stacks"]
    assert fleet["connected"] == []
