"""One view of the inventory: each host's variables derived once, the same for the roles
(install), plan and the checks (certify, scan, molecule's verifier); the inventory read
once per run and handed down, never parsed again (--limit, plan inside install, the
testinfra checks)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuboot import install, inventory, plan, transport
from gpuboot.checks.rules import RULES
from gpuboot.inventory import load_inventory
from tests.unit.plan_answer import answer

CHECKS = Path(install.__file__).parent / "checks" / "test_node.py"
INVENTORY = """\
all:
  vars: {gpuboot_profile: hgx-h100-sxm-8gpu}
  hosts:
    n1:
      ansible_host: 192.0.2.1
      gpuboot_stack: lts-550-cuda12.4
      gpuboot_mig: {instances: [3g.40gb, 3g.40gb], gpus: [0, 1]}
    n2: {ansible_host: 192.0.2.2, nvidia_driver_branch: "550", nvidia_driver_version: "550.54.15-1"}
    n3:
      ansible_host: 192.0.2.3
      nvidia_driver_branch: "550"
      nvidia_driver_version: "550.54.15-1"
      gpuboot_roce_interfaces: [enp26s0np0]
"""


@pytest.fixture
def inv(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("GPUBOOT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUBOOT_RUNS", str(tmp_path / "runs"))
    path = tmp_path / "inv.yml"
    path.write_text(INVENTORY)
    return path


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Every parse of the inventory: gpuboot's load, any other Ansible InventoryManager
    (a --limit matched by a second parse), testinfra's `ansible-inventory --list`."""
    from ansible.inventory import manager

    seen: list[str] = []
    real_load, real_manager = inventory._ansible_hosts, manager.InventoryManager

    def load(path):
        seen.append("load")
        return real_load(path)

    class Counted(real_manager):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            seen.append("InventoryManager")
            super().__init__(*args, **kwargs)

    def testinfra_reads(*_a, **_k):
        seen.append("ansible-inventory")
        raise AssertionError("testinfra read the inventory again")

    monkeypatch.setattr(inventory, "_ansible_hosts", load)
    monkeypatch.setattr(manager, "InventoryManager", Counted)
    monkeypatch.setattr("testinfra.utils.ansible_runner.get_ansible_inventory", testinfra_reads)
    return seen


class Dpkg:
    """A node answering dpkg-query with another driver than the pins want."""

    def run(self, command: str):
        out = answer("nvidia-driver-550\t550.40.07-1\tii \n")
        return SimpleNamespace(rc=0, stdout=out, stderr="")


# ---------------------------------------------------------------- one derivation
def test_certify_judges_with_the_variables_the_roles_receive(inv, monkeypatch):
    """certify's collection gets each host's variables from the loaded view, exactly as
    install hands them to the roles. They disagreed: the collection derived them again
    without the profile's RoCE interfaces the roles configured."""
    from gpuboot import engine

    seen = {}

    def collect(name, _host, hostvars, _level=None):
        seen[name] = hostvars
        raise RuntimeError("nothing collected here")

    monkeypatch.setattr(engine, "collect_node", collect)
    engine.run(str(inv), transport=lambda *_a: object())
    loaded = load_inventory(inv)
    assert seen == {h: loaded.resolved(h) for h in ("n1", "n2", "n3")}
    n1, n2, n3 = (loaded.views[h] for h in ("n1", "n2", "n3"))
    assert n1.role_vars["gpuboot_roce_interfaces"] == [
        nic["netdev"] for nic in n1.profile["hardware"]["nics"]
    ]
    assert n1.stack is not None and n1.stack.name == "lts-550-cuda12.4"
    assert n1.vars["nvidia_mig_layout"][:3] == [["3g.40gb", "3g.40gb"]] * 2 + [[]]
    assert n2.stack is None and "nvidia_mig_layout" not in n2.vars
    assert n3.vars["gpuboot_roce_interfaces"] == ["enp26s0np0"]  # the inventory's own wins


# ---------------------------------------------------------------- read once
def test_install_check_with_a_kubeconfig_plans_from_the_inventory_it_loaded(
    inv, reads, monkeypatch
):
    """`install --check --kubeconfig --limit` reads the inventory once: --limit is matched
    on that reading and the plan that decides who would be drained is made from it."""
    monkeypatch.setattr("gpuboot.k8s.gate.connect", lambda *_a: object())
    monkeypatch.setattr(install, "run", lambda *_a, **_k: SimpleNamespace(hosts={}))
    reached = []
    monkeypatch.setattr(transport, "connect", lambda name, *_a: reached.append(name) or Dpkg())
    result = install.install(
        str(inv), limit="n2:n3", check=True, drain=install.Drain(kubeconfig="kube.yml")
    )
    assert result.would_drain == ["n2", "n3"]
    assert sorted(reached) == ["n2", "n3"]
    assert reads == ["load", "InventoryManager"]


def test_plan_reads_the_inventory_once_and_reaches_nodes_through_certify_transport(
    inv, reads, monkeypatch
):
    calls = []
    monkeypatch.setattr(transport, "connect", lambda *args: calls.append(args) or Dpkg())
    doc = plan.plan(str(inv), limit="n2,n3")
    assert [n["host"] for n in doc["nodes"]] == ["n2", "n3"]
    assert all(n["changes"] for n in doc["nodes"])
    assert reads == ["load", "InventoryManager"]
    # the inventory's own variables and path, as the engine hands them to the transport
    assert [(name, path) for name, _vars, path in calls] == [("n2", inv), ("n3", inv)]
    assert calls[0][1]["ansible_host"] == "192.0.2.2"


def test_a_transport_that_cannot_be_built_is_that_node_s_error(inv, monkeypatch):
    def connect(name, *_a):
        if name == "n2":
            raise RuntimeError("no such backend")
        return Dpkg()

    monkeypatch.setattr(transport, "connect", connect)
    n2, n3 = plan.plan(str(inv), limit="n2,n3")["nodes"]
    assert n2["unreachable"] and n2["error"] == "unreachable: no such backend"
    assert n3["changes"]


# ---------------------------------------------------------------- molecule's verifier
pytest_plugins = ["pytester"]


def test_the_testinfra_checks_take_hosts_and_variables_from_the_loaded_view(
    inv, reads, monkeypatch, pytester
):
    """The verifier's hosts come from gpuboot's checked view (--hosts read by Ansible's
    pattern rules), each reached through certify's transport; testinfra never runs
    `ansible-inventory`. Test ids stay testinfra's (molecule's tests read them)."""
    reached = {}

    class Broken:
        def run(self, command: str):
            return SimpleNamespace(rc=1, stdout="", stderr="no shell here")

    def connect(name, hostvars, path):
        reached[name] = (hostvars, path)
        return Broken()

    monkeypatch.setattr(transport, "connect", connect)
    result = pytester.runpytest_inprocess(
        str(CHECKS),
        f"--ansible-inventory={inv}",
        "--hosts=ansible://n1,n3",
        "-p",
        "no:cacheprovider",
        "-q",
    )
    assert reads == ["load", "InventoryManager"]
    result.assert_outcomes(errors=2 * len(RULES))
    result.stdout.fnmatch_lines([f"ERROR *test_rule?ansible://n1-{RULES[0].id}?*"])
    assert sorted(reached) == ["n1", "n3"]
    assert reached["n1"] == (load_inventory(inv).hosts["n1"], inv)


def test_a_host_pinned_without_a_stack_gets_the_component_table(inv):
    """The roles take their package patterns, kernel modules and units from the table
    through the derived variables, with or without a stack: a driver pinned alone must
    get them too, or its module and service tasks have nothing to act on."""
    views = load_inventory(inv).views
    for host in ("n1", "n2"):
        role_vars = views[host].role_vars
        assert role_vars["nvidia_driver_modules"], host
        assert role_vars["nvidia_driver_supersede"], host
