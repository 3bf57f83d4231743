"""Each evidence file is parsed once per node, whichever rules read it, and again for the
next node (checks.base.parsed): a node's verdicts cost its own parses, never another's.

The node is a real lab node's certify bundle (hgx-h100-sxm-8gpu, stack lts-550-cuda12.4,
quick probes: tests/fixtures/evaluate/lab-h100-550-quick)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from gpuboot.bundle.manifest import write_manifest
from gpuboot.bundle.store import read_host_bundle
from gpuboot.certify import evaluate_bundle
from gpuboot.checks import rules, stack_rules
from gpuboot.evidence import forms
from gpuboot.profiles import load_profile

NODE = Path(__file__).parents[2] / "fixtures" / "evaluate" / "lab-h100-550-quick" / "node1"


@pytest.fixture
def parses(monkeypatch) -> Counter:
    """How often each parser the rules share runs (one counting wrapper per parser,
    installed in the registry of forms, or in the rule module that calls it)."""
    calls: Counter = Counter()

    def counting(name, fn):
        def wrapper(*args):
            calls[name] += 1
            return fn(*args)

        return wrapper

    for key, name in ((("nics", "ibstat"), "ibstat"), (("smi_q", "text"), "-q")):
        monkeypatch.setitem(forms._PARSER, key, counting(name, forms.parser_of(*key)))
    monkeypatch.setattr(
        stack_rules, "parse_dpkg_query", counting("dpkg", stack_rules.parse_dpkg_query)
    )
    return calls


def _judge(evidence, meta):
    ctx = rules.NodeContext(
        host=meta["host"],
        profile=load_profile(meta["profile"]),
        hostvars=meta["pins"],
        meta=meta,
    )
    return rules.evaluate(evidence, ctx)


def test_a_file_read_by_several_rules_is_parsed_once_per_node(parses):
    evidence, meta = read_host_bundle(NODE)
    findings = _judge(evidence, meta)
    status = {f.rule: f.status for f in findings}
    readers = ("GPU-001", "ECC-001", "STK-001", "STK-002", "FAB-001", "PCI-002", "NIC-001")
    assert {status[r] for r in readers} == {rules.PASS}  # each reader judged the shared parse
    # -q: eight rules; the package list: STK-001, STK-002, FAB-001; ibstat: PCI-002, NIC-001
    assert parses == {"-q": 1, "dpkg": 1, "ibstat": 1}


def test_the_next_node_pays_its_own_parses_even_for_identical_files(parses):
    evidence, meta = read_host_bundle(NODE)
    _judge(evidence, meta)
    again, meta2 = read_host_bundle(NODE)  # another node, byte-identical files
    _judge(again, meta2)
    assert parses == {"-q": 2, "dpkg": 2, "ibstat": 2}


def test_evaluate_of_a_real_node_is_unchanged_by_the_memo(tmp_path):
    """The memo changes how often a file is parsed, not what any rule finds."""
    shutil.copytree(NODE, tmp_path / "node1")
    shutil.copytree(NODE, tmp_path / "node2")
    write_manifest(tmp_path, "test", {})
    doc = evaluate_bundle(str(tmp_path)).to_dict()
    assert doc["manifest"].startswith("checksums verified; unsigned") and doc["passed"]
    first, second = ([(f["rule"], f["status"]) for f in n["findings"]] for n in doc["nodes"])
    assert first == second and len(first) == len(rules.RULES)
