"""`gpuboot plan` at fleet size: nodes with the same change set share one table, named
compactly in natural order; --json keeps every node's detail plus the groups."""

from __future__ import annotations

import json

import pytest

from gpuboot import cli
from gpuboot import plan as planmod
from gpuboot.report._util import host_key

DRIVER = "nvidia-driver-550-open"


def node(name: str, current: str | None, stack: str = "lts-550-cuda12.4") -> dict:
    items = [
        {
            "package": DRIVER,
            "current": current,
            "desired": "550.54.15-1",
            "action": "keep"
            if current == "550.54.15-1"
            else ("install" if not current else "change"),
            "reboot": current != "550.54.15-1",
            "restarts": [],
            "replaces": None,
        },
        {
            "package": "cuda-toolkit-12-4",
            "current": "12.4.1-1",
            "desired": "12.4.1-1",
            "action": "keep",
            "reboot": False,
            "restarts": [],
            "replaces": None,
        },
    ]
    changes = [i for i in items if i["action"] != "keep"]
    return {
        "host": name,
        "stack": stack,
        "items": items,
        "changes": len(changes),
        "reboot": any(i["reboot"] for i in changes),
        "restarts": [],
    }


def fleet() -> list[dict]:
    """300 nodes: 150 fresh (driver to install), 148 converged, one on an older driver,
    one unreachable; in inventory order node1, node10, node100... as a dict would give."""
    nodes = [node(f"node{i}", None) for i in range(1, 151)]
    nodes += [node(f"node{i}", "550.54.15-1") for i in range(151, 299)]
    nodes.append(node("node299", "550.40.07-1"))
    nodes.append({"host": "node300", "unreachable": True, "error": "unreachable: timed out"})
    return sorted(nodes, key=lambda n: n["host"])  # lexical, as a careless sort would


def test_same_change_set_is_one_group_failures_first():
    groups = planmod.group(fleet())
    assert [g["label"] for g in groups] == ["node300", "node[1-150]", "node299", "node[151-298]"]
    assert "error" in groups[0]
    fresh = groups[1]
    assert len(fresh["hosts"]) == 150 and fresh["hosts"][:3] == ["node1", "node2", "node3"]
    assert [i["package"] for i in fresh["items"]] == [DRIVER]  # the changes only
    assert groups[2]["items"][0]["current"] == "550.40.07-1"  # other from-version: own set
    assert groups[3]["changes"] == 0


def test_render_prints_one_table_per_change_set():
    nodes = fleet()
    text = planmod.render({"nodes": nodes, "groups": planmod.group(nodes)})
    assert text.count("package  ") == 2  # two change sets, two tables (not 300)
    assert text.index("node300: ERROR unreachable") < text.index("node[1-150]")
    assert "node[1-150] (150 nodes, lts-550-cuda12.4): 1 of 2 pinned packages change" in text
    assert "node[151-298] (148 nodes, lts-550-cuda12.4): up to date" in text
    assert text.rstrip().endswith(
        "300 node(s): 151 with package changes (2 distinct change set(s)), "
        "148 up to date, 1 not read"
    )


@pytest.fixture
def inventory(tmp_path):
    path = tmp_path / "site.yml"
    path.write_text("all:\n  hosts:\n    node1: {}\n")
    return path


def test_cli_plan_groups_and_json_keeps_detail(monkeypatch, capsys, inventory):
    nodes = fleet()

    def fake_plan(inv, *, limit=None):  # what plan() returns, read from no host
        ordered = sorted(nodes, key=lambda n: host_key(n["host"]))
        return {"inventory": inv, "nodes": ordered, "groups": planmod.group(ordered)}

    monkeypatch.setattr(planmod, "plan", fake_plan)
    assert cli.main(["plan", "-i", str(inventory)]) == 1  # one node not read
    out = capsys.readouterr().out
    assert out.count("package  ") == 2 and "node[1-150]" in out
    assert cli.main(["plan", "-i", str(inventory), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["nodes"]) == 300 and doc["nodes"][1]["host"] == "node2"
    assert doc["nodes"][0]["items"][1]["action"] == "keep"  # per-node detail kept
    assert [len(g["hosts"]) for g in doc["groups"]] == [1, 150, 1, 148]
