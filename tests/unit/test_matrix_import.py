"""`gpuboot matrix import`: a fleet where one hall runs the 550 LTS packages (a real lab
node's dpkg listing after `gpuboot install`) and another the 570 ones becomes two site
stacks named by hall, each passing `matrix check` and planning no change on its nodes (a
no-op install); what no stack can pin is refused naming node, component and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

from gpuboot import cli, matrix, transport
from gpuboot.evidence.packages import installed_versions
from gpuboot.stacks import compare, load_stack, mirror_packages
from tests.unit.plan_answer import answer

DPKG = Path(__file__).parents[1] / "fixtures" / "captures" / "dpkg"
CONVERGED = (DPKG / "dpkg-query_-W.converged.txt").read_text()  # lts-550-cuda12.4, real
LTS, PROD = "lts-550-cuda12.4", "prod-570-cuda12.8"


def listing_570() -> str:
    """The converged node's listing with the 550 stack's packages swapped for the 570
    stack's at their pinned versions (derived: the lab installs these same packages)."""
    lts = {n for n, _ in mirror_packages(load_stack(LTS), "debian")}
    kept = [ln for ln in CONVERGED.splitlines(keepends=True) if ln.split("\t")[0] not in lts]
    pins = mirror_packages(load_stack(PROD), "debian")
    return "".join(kept) + "".join(f"{n}\t{v}\thi \n" for n, v in pins if "linux-" not in n)


def swap(text: str, package: str, version: str | None) -> str:
    lines = [ln for ln in text.splitlines(keepends=True) if ln.split("\t")[0] != package]
    return "".join(lines) + (f"{package}\t{version}\thi \n" if version else "")


RUNFILE = "unowned /usr/bin/nvidia-installer\ninstaller-version 535.161.08\n"
ANSWERS = {
    "a1": CONVERGED,
    "a2": CONVERGED,
    "b1": listing_570(),
    # one driver package of another build than the rest
    "c1": swap(CONVERGED, "nvidia-utils-550", "550.54.14-1"),
    # fabric manager's package gone, NSCQ's left: fabric manager installed in part? no:
    # the container toolkit without its base package
    "c2": swap(CONVERGED, "nvidia-container-toolkit-base", None),
    "c3": CONVERGED,  # with a .run driver beside the packages
    "c4": swap(CONVERGED, "cuda-toolkit-12-4", None),
}
INVENTORY = """\
all:
  # inventory validation asks every host for a stack: a provisional one, which import
  # does not read (what the nodes run decides)
  vars: {gpuboot_profile: hgx-h100-sxm-8gpu, gpuboot_baseline_manage_kernel: false,
         gpuboot_stack: lts-550-cuda12.4}
  children:
    hall_a: {hosts: {a1: {ansible_host: 192.0.2.1}, a2: {ansible_host: 192.0.2.2}}}
    hall_b: {hosts: {b1: {ansible_host: 192.0.2.3}}}
    odd:
      hosts:
        c1: {ansible_host: 192.0.2.4}
        c2: {ansible_host: 192.0.2.5}
        c3: {ansible_host: 192.0.2.6}
        c4: {ansible_host: 192.0.2.7}
"""


class _Host:
    def __init__(self, name: str):
        self.name = name
        self.backend = type("B", (), {"get_hostname": lambda _s: name, "NAME": "ssh"})()

    def run(self, command):
        runfile = RUNFILE if self.name == "c3" else ""
        out = answer(ANSWERS[self.name], runfile)
        return CommandResult(LocalBackend(), 0, command.encode(), out.encode(), b"")


@pytest.fixture
def fleet(tmp_path, monkeypatch) -> Path:
    inv = tmp_path / "inv.yml"
    inv.write_text(INVENTORY)
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(transport, "connect", lambda name, *_a: _Host(name))
    return inv


def _import(inv: Path, out: Path, capsys, *extra: str) -> tuple[int, dict]:
    code = cli.main(["matrix", "import", "-i", str(inv), "--out", str(out), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_two_halls_become_two_checked_stacks_that_change_nothing(fleet, tmp_path, capsys):
    out = tmp_path / "site"
    code, doc = _import(fleet, out, capsys, "--limit", "hall_a,hall_b")
    assert code == 0, json.dumps({k: doc[k] for k in ("refused", "not_checked", "unread")})
    assert [(s["stack"], s["hosts"]) for s in doc["stacks"]] == [
        ("site-hall-a", ["a1", "a2"]),
        ("site-hall-b", ["b1"]),
    ]
    assert sorted(p.name for p in out.iterdir()) == ["site-hall-a.yaml", "site-hall-b.yaml"]
    for entry, shipped, host in ((doc["stacks"][0], LTS, "a1"), (doc["stacks"][1], PROD, "b1")):
        assert matrix.check(entry["file"])["violations"] == []
        stack = load_stack(entry["file"])
        kernel = {p.name for p in stack.kernel_pins("debian").packages}
        pins = [p for p in mirror_packages(stack, "debian") if p[0] not in kernel]
        want = [p for p in mirror_packages(load_stack(shipped), "debian") if p[0] not in kernel]
        assert sorted(pins) == sorted(want)  # the versions the nodes run: the shipped ones
        # a no-op install: plan's comparison of the node with its new stack changes nothing
        items = compare(installed_versions(ANSWERS[host]), stack, "debian")
        assert [i for i in items if i.action != "keep" and i.package not in kernel] == []


def test_what_no_stack_can_pin_is_refused_by_node_component_and_why(fleet, tmp_path, capsys):
    code, doc = _import(fleet, tmp_path / "site", capsys, "--limit", "odd")
    assert code == 1 and doc["stacks"] == []
    refused = {r["host"]: (r["component"], r["why"]) for r in doc["refused"]}
    assert refused["c1"] == (
        "driver",
        "mixed versions within the node: nvidia-driver-550-open 550.54.15-1, "
        "nvidia-utils-550 550.54.14-1 (a stack pins one version for them)",
    )
    assert refused["c2"][0] == "container_toolkit"
    assert refused["c2"][1].startswith("installed in part: ") and (
        "without nvidia-container-toolkit-base" in refused["c2"][1]
    )
    assert refused["c3"] == (
        "driver",
        "installed outside packages (/usr/bin/nvidia-installer, installer 535.161.08): "
        "remove it with `nvidia-installer --uninstall` first",
    )
    assert refused["c4"] == ("cuda", "not installed (every stack pins it)")
    assert not (tmp_path / "site").exists()  # nothing to write, nothing written


def test_a_node_refused_leaves_its_groups_others_their_stack(fleet, tmp_path, capsys):
    code, doc = _import(fleet, tmp_path / "site", capsys, "--limit", "a1,c1")
    assert code == 1
    # a1 alone is not the whole of any group: a numbered stack
    assert [(s["stack"], s["hosts"]) for s in doc["stacks"]] == [("site-1", ["a1"])]
    assert [r["host"] for r in doc["refused"]] == ["c1"]


def test_an_out_dir_in_use_is_refused_before_any_host(fleet, tmp_path, monkeypatch, capsys):
    def never(*_a):
        raise AssertionError("a host was reached")

    monkeypatch.setattr(transport, "connect", never)
    out = tmp_path / "site"
    out.mkdir()
    (out / "lts.yaml").write_text("kept\n")
    code = cli.main(["matrix", "import", "-i", str(fleet), "--out", str(out)])
    assert code == 2
    assert "--out" in capsys.readouterr().err and (out / "lts.yaml").read_text() == "kept\n"
    code = cli.main(["matrix", "import", "-i", str(fleet)])
    assert code == 2 and "needs -i INVENTORY and --out DIR" in capsys.readouterr().err
