"""The collection's gpuboot.node.roce_qos module run for real, as Ansible runs it on a node
(a JSON args file), against a fake sysfs tree and an mlnx_qos stand-in first on PATH that
answers with a real capture (tests/fixtures/captures/mlnx_qos, the trust line and PFC row
set from its state), or cut short, or failing as the real tool does; then against the
lab emulator's own mlnx_qos and sysfs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.unit.ansible.modrun import run_module
from tests.unit.gpuboot_lab._emu import GPUEMU, make_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

MODULE = "ansible_collections.gpuboot.node.plugins.modules.roce_qos"
CAPTURE = (
    REPO / "tests"
) / "fixtures/captures/mlnx_qos/connectx-eth4-trust-dscp-pfc-prio3-os-controlled.txt"
RAILS = ("enp26s0np0", "enp60s0np0", "enp77s0np0")
PFC3 = "0,0,0,1,0,0,0,0"
SWITCHES = ("roce_np/enable/3", "roce_rp/enable/3")

# mlnx_qos: logs its argv; a read prints the capture with this rail's trust and PFC row
# ("cut" keeps only that many characters of it, "fail" answers as for a missing device);
# a set stores --trust/--pfc and prints the new state, as the real tool does.
FAKE = r"""
import json, os, re, sys
root = os.environ["FAKE_ROOT"]
args = sys.argv[1:]
with open(os.path.join(root, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps(["mlnx_qos"] + args) + "\n")
path = os.path.join(root, "state.json")
state = json.load(open(path))
dev = args[args.index("-i") + 1]
rail = state.get(dev)
if rail is None or rail.get("fail"):
    sys.stderr.write('Netlink error: Cannot find device "%s"\n' % dev)
    sys.exit(1)
if "--trust" in args:
    rail["trust"] = args[args.index("--trust") + 1]
if "--pfc" in args:
    rail["pfc"] = args[args.index("--pfc") + 1]
json.dump(state, open(path, "w"))
text = open(os.environ["CAPTURE"]).read()
text = text.replace("trust state: dscp", "trust state: " + rail["trust"])
row = "".join("%-4s" % f for f in rail["pfc"].split(","))
text = re.sub(r"(?m)^(\s*enabled\s+).*$", lambda m: m.group(1) + row, text)
sys.stdout.write(text[: rail.get("cut", len(text))])
"""


class Node:
    """One fake node: sysfs ECN switches per rail, mlnx_qos state per rail."""

    def __init__(self, root: Path, rails: dict[str, dict], mlnx_qos: bool = True):
        self.root = root
        (root / "bin").mkdir()
        if mlnx_qos:
            exe = root / "bin" / "mlnx_qos"
            exe.write_text(f"#!{sys.executable}\n{FAKE}")
            exe.chmod(0o755)
        self.sysfs = root / "sys"
        for dev, rail in rails.items():
            for proto in ("roce_np", "roce_rp"):
                d = self.ecn_dir(dev) / proto / "enable"
                d.mkdir(parents=True)
                for prio in range(8):
                    on = rail.get("ecn", {}).get(f"{proto}/enable/{prio}", False)
                    (d / str(prio)).write_text("1\n" if on else "0\n")
        state = {dev: {k: v for k, v in r.items() if k != "ecn"} for dev, r in rails.items()}
        (root / "state.json").write_text(json.dumps(state))

    def ecn_dir(self, dev: str) -> Path:
        return self.sysfs / "class" / "net" / dev / "ecn"

    def switch(self, dev: str, rel: str) -> str:
        return (self.ecn_dir(dev) / rel).read_text().strip()

    def run(self, check: bool = False, env: dict | None = None, **args) -> dict:
        args = {"interfaces": list(RAILS), "sysfs": str(self.sysfs), **args}
        env = {"FAKE_ROOT": str(self.root), "CAPTURE": str(CAPTURE), **(env or {})}
        return run_module("roce_qos", self.root, args, check=check, env=env)

    def calls(self) -> list[list[str]]:
        log = self.root / "calls.jsonl"
        return [json.loads(c) for c in log.read_text().splitlines()] if log.exists() else []

    def sets(self) -> list[list[str]]:
        return [c for c in self.calls() if "--trust" in c]

    def state(self) -> dict:
        return json.loads((self.root / "state.json").read_text())


def right(**extra) -> dict:
    return {"trust": "dscp", "pfc": PFC3, "ecn": dict.fromkeys(SWITCHES, True), **extra}


def fresh(**extra) -> dict:
    return {"trust": "pcp", "pfc": "0,0,0,0,0,0,0,0", **extra}


@pytest.fixture
def node(tmp_path):
    return lambda rails, **kw: Node(tmp_path, json.loads(json.dumps(rails)), **kw)


def test_a_converged_node_is_read_once_per_rail_and_left_alone(node):
    n = node({dev: right() for dev in RAILS})
    res = n.run()
    assert res["changed"] is False, res
    assert n.calls() == [["mlnx_qos", "-i", dev] for dev in RAILS]
    assert "diff" not in res or res["diff"] == []
    assert res["rails"]["enp60s0np0"] == {
        "trust": "dscp",
        "pfc_priorities": [3],
        "ecn": dict.fromkeys(SWITCHES, True),
        "set_qos": False,
        "enable_ecn": [],
    }


def test_only_what_differs_is_set_then_nothing(node):
    n = node(
        {
            "enp26s0np0": fresh(),  # nothing set: QoS and both ECN switches
            "enp60s0np0": right(ecn={"roce_rp/enable/3": True}),  # notification point off
            "enp77s0np0": right(),
        }
    )
    res = n.run()
    assert res["changed"] is True
    assert n.sets() == [["mlnx_qos", "-i", "enp26s0np0", "--trust", "dscp", "--pfc", PFC3]]
    assert {dev: r["enable_ecn"] for dev, r in res["rails"].items()} == {
        "enp26s0np0": list(SWITCHES),
        "enp60s0np0": ["roce_np/enable/3"],
        "enp77s0np0": [],
    }
    assert res["rails"]["enp26s0np0"]["trust"] == "pcp"  # as read, before the change
    assert n.state()["enp26s0np0"] == {"trust": "dscp", "pfc": PFC3}
    assert all(n.switch(dev, s) == "1" for dev in RAILS for s in SWITCHES)
    assert n.switch("enp26s0np0", "roce_np/enable/4") == "0"  # only the PFC priorities
    assert n.run()["changed"] is False


def test_trust_alone_or_pfc_alone_differing_sets_both(node):
    n = node({"enp26s0np0": right(trust="pcp"), "enp60s0np0": right(pfc="0,0,0,1,1,0,0,0")})
    res = n.run(interfaces=["enp26s0np0", "enp60s0np0"])
    assert res["changed"] is True
    assert [c[2] for c in n.sets()] == ["enp26s0np0", "enp60s0np0"]
    assert res["rails"]["enp60s0np0"]["pfc_priorities"] == [3, 4]


def test_check_mode_changes_nothing_and_diffs_each_rail_that_would_change(node):
    n = node({"enp26s0np0": fresh(), "enp60s0np0": right(), "enp77s0np0": right(trust="pcp")})
    res = n.run(check=True)
    assert res["changed"] is True
    assert n.sets() == [] and n.state()["enp26s0np0"]["trust"] == "pcp"
    assert n.switch("enp26s0np0", "roce_np/enable/3") == "0"
    assert res["rails"]["enp26s0np0"]["set_qos"] is True
    assert res["rails"]["enp26s0np0"]["enable_ecn"] == list(SWITCHES)
    diffs = {d["before_header"]: d for d in res["diff"]}
    assert list(diffs) == ["enp26s0np0", "enp77s0np0"]  # the converged rail has none
    assert diffs["enp26s0np0"]["before"] == (
        "trust: pcp\npfc: 0,0,0,0,0,0,0,0\nroce_np/enable/3: 0\nroce_rp/enable/3: 0\n"
    )
    assert diffs["enp26s0np0"]["after"] == (
        f"trust: dscp\npfc: {PFC3}\nroce_np/enable/3: 1\nroce_rp/enable/3: 1\n"
    )
    assert "trust: pcp" in diffs["enp77s0np0"]["before"]


def test_check_mode_without_ofed_yet_reports_every_rail_as_would_change(node):
    # No mlnx_qos on the node (DOCA-OFED comes earlier in the same run): not a failure.
    n = node({dev: fresh() for dev in RAILS}, mlnx_qos=False)
    res = n.run(check=True, env={"PATH": f"{n.root / 'bin'}"})
    assert res.get("failed") is not True and res["changed"] is True, res
    assert all(r["set_qos"] and r["trust"] is None for r in res["rails"].values())
    assert [d["before_header"] for d in res["diff"]] == list(RAILS)
    assert "trust: unknown" in res["diff"][0]["before"]
    # A real run cannot set anything without it: it fails.
    res = n.run(env={"PATH": f"{n.root / 'bin'}"})
    assert res["failed"] is True and "mlnx_qos" in res["msg"]


def test_a_rail_whose_mlnx_qos_fails_fails_the_task_by_name_and_nothing_is_set(node):
    n = node({"enp26s0np0": fresh(), "enp60s0np0": right(fail=True), "enp77s0np0": right()})
    res = n.run()
    assert res["failed"] is True, res
    assert "enp60s0np0" in res["msg"] and "Cannot find device" in res["msg"]
    assert "enp26s0np0" not in res["msg"]
    assert n.sets() == [] and n.switch("enp26s0np0", "roce_np/enable/3") == "0"


def test_check_mode_takes_a_failing_rail_as_would_change_and_warns_by_name(node):
    # As the old shell read did: in --check the rails may not be up yet (the real run starts openibd
    # first). Would change, never "already right", and the operator is told which rail.
    n = node({"enp26s0np0": right(), "enp60s0np0": right(fail=True), "enp77s0np0": right()})
    res = n.run(check=True)
    assert res.get("failed") is not True and res["changed"] is True, res
    assert res["rails"]["enp60s0np0"]["trust"] is None and res["rails"]["enp60s0np0"]["set_qos"]
    assert not res["rails"]["enp26s0np0"]["set_qos"]
    (warning,) = res["warnings"]
    text = json.dumps(warning)  # ansible-core 2.19: a structured warning, its msg inside
    assert "enp60s0np0" in text and "Cannot find device" in text and "enp26s0np0" not in text
    assert n.sets() == []


CAPTURED = CAPTURE.read_text()


@pytest.mark.parametrize(
    ("cut", "why"),
    [
        (CAPTURED.index("trust state"), "trust"),  # the tool stopped after the DCBX line
        (CAPTURED.index("PFC configuration"), "PFC"),  # trust read, no PFC table
        (CAPTURED.index("enabled") + len("enabled     0   0   0   1"), "PFC"),  # 4 flags
        (CAPTURED.index("tc: 0"), "tc table"),  # trust and PFC whole, the tail gone
    ],
    ids=["no-trust-line", "no-pfc-table", "pfc-row-of-4", "no-tc-table"],
)
def test_output_cut_short_fails_the_task_by_name_never_already_right(node, cut, why):
    # The rail is right up to the cut: unreadable must not pass as "nothing to do".
    n = node({"enp26s0np0": right(), "enp60s0np0": right(cut=cut), "enp77s0np0": fresh()})
    res = n.run()
    assert res["failed"] is True, res
    assert "enp60s0np0" in res["msg"] and why in res["msg"], res["msg"]
    assert n.sets() == []


def test_a_missing_ecn_switch_fails_the_task_by_name(node):
    n = node({dev: right() for dev in RAILS})
    (n.ecn_dir("enp77s0np0") / "roce_rp" / "enable" / "3").unlink()
    res = n.run()
    assert res["failed"] is True and "enp77s0np0" in res["msg"], res
    assert "roce_rp/enable/3" in res["msg"]


def test_ecn_off_leaves_the_switches_alone(node):
    n = node({dev: fresh() for dev in RAILS})
    res = n.run(ecn=False)
    assert res["changed"] is True and len(n.sets()) == 3
    assert all(n.switch(dev, s) == "0" for dev in RAILS for s in SWITCHES)
    assert all(r["ecn"] == {} and r["enable_ecn"] == [] for r in res["rails"].values())


def test_pfc_on_two_priorities_sets_and_enables_both(node):
    n = node({"enp26s0np0": fresh()})
    res = n.run(interfaces=["enp26s0np0"], pfc_priorities=[3, 4], trust="pcp")
    assert n.sets() == [
        ["mlnx_qos", "-i", "enp26s0np0", "--trust", "pcp", "--pfc", "0,0,0,1,1,0,0,0"]
    ]
    assert res["rails"]["enp26s0np0"]["enable_ecn"] == [
        "roce_np/enable/3",
        "roce_np/enable/4",
        "roce_rp/enable/3",
        "roce_rp/enable/4",
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"pfc_priorities": [8]}, "0-7"),
        ({"interfaces": ["../../etc"]}, "not a network device name"),
        ({"interfaces": ["-f"]}, "not a network device name"),
        ({"trust": "vlan"}, "trust"),
    ],
)
def test_bad_input_is_refused_before_any_rail_is_read(node, args, says):
    n = node({dev: fresh() for dev in RAILS})
    res = n.run(**args)
    assert res["failed"] is True and says in res["msg"], res
    assert n.calls() == []


# ---------------------------------------------------- the lab emulator's mlnx_qos and sysfs
def test_the_emulators_mlnx_qos_and_ecn_switches_converge(tmp_path):
    """The emulated node as the lab boots it with DOCA-OFED loaded: the module sets every
    Ethernet rail from the emulator's defaults, then finds nothing to do."""
    emu = make_node(tmp_path)
    for mod in ("ib_core", "mlx5_core", "mlx5_ib", "ib_uverbs"):
        emu.install_module(mod, "24.10-1.1.4")
    emu.run("ctl", "boot", "--force", check=True)
    rails = [n["netdev"] for n in emu.profile["hardware"]["nics"] if n["link_layer"] == "Ethernet"]
    assert rails
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "mlnx_qos"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} {GPUEMU} mlnx_qos "$@"\n')
    shim.chmod(0o755)
    sysfs = emu.root / "run" / "gpuemu" / "sys"
    args = {"interfaces": rails, "sysfs": str(sysfs), "trust": "dscp", "pfc_priorities": [3]}

    def run() -> dict:
        env = {**emu.env, "PATH": f"{bindir}:/usr/bin:/bin"}
        return run_module("roce_qos", tmp_path, args, env=env, timeout=120)

    first = run()
    assert first["changed"] is True and not first.get("failed"), first
    assert all(r["set_qos"] and r["trust"] == "pcp" for r in first["rails"].values())
    shown = emu.run("mlnx_qos", "-i", rails[-1], check=True).out
    assert "Priority trust state: dscp" in shown
    ecn = sysfs / "class" / "net" / rails[-1] / "ecn"
    assert (ecn / "roce_np/enable/3").read_text().strip() == "1"
    assert (ecn / "roce_rp/enable/3").read_text().strip() == "1"
    again = run()
    assert again["changed"] is False, again
