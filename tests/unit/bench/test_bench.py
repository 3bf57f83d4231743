"""bench/bench.py's parts that need no lab: the generated fleet inventory and the CPU of
loading it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_bench"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["bench_bench"]


def test_fleet_inventory_spreads_its_hosts_over_domains_each_served(bench):
    doc = bench.fleet_inventory(10, domains=3)["all"]
    hosts, executors = doc["hosts"], doc["children"]["gpuboot_executors"]["hosts"]
    assert len(hosts) == 10 and len(set(h["ansible_host"] for h in hosts.values())) == 10
    served = {d for e in executors.values() for d in e["gpuboot_executor_domains"]}
    assert {h["gpuboot_domain"] for h in hosts.values()} == served == {"hall-0", "hall-1", "hall-2"}


def test_inventory_load_times_loads_of_the_hosts_asked(bench, tmp_path, monkeypatch):
    from gpuboot import inventory

    loaded: list[int] = []
    real = inventory.load_inventory

    def counted(path):
        inv = real(path)
        loaded.append(len(inv.views))
        return inv

    monkeypatch.setattr(inventory, "load_inventory", counted)
    figures = bench.inventory_load(tmp_path, hosts=12, rounds=2)
    assert loaded == [12, 12]
    assert figures["inventory_load_hosts"] == 12
    assert figures["inventory_load_cpu_s"] > 0
    assert figures["inventory_load_cpu_per_host_ms"] == pytest.approx(
        1000 * figures["inventory_load_cpu_s"] / 12
    )
