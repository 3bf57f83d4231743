"""`gpuboot evaluate` on a bundle certify wrote gives certify's verdict and every rule's
status and reason, at each probe level and for the lab's fault kinds.

The node is the unit-test emulator (tests/unit/checks/_emunode.py); the run is certify's
own pipeline minus SSH: the collection script, the host's meta.json (gpuboot.bundle.meta.node_meta),
the pair phase, the rules with the node fixture's context, write_host_bundle and the
manifest; then evaluate_bundle re-reads the bundle.
"""

from __future__ import annotations

import time

import pytest

from gpuboot.bundle.manifest import write_manifest
from gpuboot.bundle.meta import node_meta
from gpuboot.bundle.model import ProbeOutput
from gpuboot.bundle.store import bundle_host_dir, write_host_bundle
from gpuboot.certify import _node_report, evaluate_bundle
from gpuboot.checks import rules
from gpuboot.checks.pair_phase import run_pair_probes
from gpuboot.collect import state_probes
from gpuboot.probes import node_probes
from tests.unit.checks._emunode import STACK_VARS, Daemon, collect, dpkg_line, full_node

pytestmark = pytest.mark.subprocess  # starts processes: not in the pure tier

PROFILE = "hgx-h100-sxm-8gpu"
# Variables the rules read besides the emulator's stack: package pins without the
# nvidia_/gpuboot_ prefix (STK-002 judges them), RoCE settings, threshold overrides.
EXTRA = {
    "gpuboot_profile": PROFILE,
    "gpuboot_baseline_manage_kernel": True,
    "kernel_packages": ["linux-image-6.8.0-60-generic=6.8.0-60.63"],
    "nvidia_driver_packages": ["nvidia-utils-550=550.54.15-1"],
    "nvidia_fabricmanager_packages": ["nvidia-fabricmanager-550=550.54.15-1"],
    "gpuboot_roce_pfc_priorities": [3],
    "gpuboot_thresholds": {"warn_below": 0.85},
}

CASES = [
    ("none", None),
    ("none", "xid 79 2"),
    ("none", "nic-down mlx5_1"),
    ("none", "qos-drift mlx5_0"),
    ("quick", None),
    ("quick", "thermal-throttle 0"),
    ("full", None),
    ("full", "nvlink-down 1 3"),
]


def _certify_one(node, tmp_path, level: str, fault: str | None):
    """What certify does for one host: returns (findings, report, bundle dir)."""
    if fault:
        node.run("ctl", "fault", "add", *fault.split(), check=True)
    daemons = [
        ("nv-hostengine", "hostengine", "-n"),
        ("nvidia-persistenced", "persistenced", "--foreground"),
        ("nv-fabricmanager", "fabricmanager", "--foreground"),
    ]
    opened = [Daemon(node, tool, key, *args) for tool, key, *args in daemons]
    started = time.time()
    try:
        evidence = collect(node, tmp_path, level, **EXTRA)
    finally:
        for d in opened:
            d.__exit__()
    evidence["dpkg-query_-W.txt"] = ProbeOutput(dpkg_line(), "", 0)
    evidence["reboot-required.txt"] = ProbeOutput("", "", 0)
    hostvars = {**STACK_VARS, **EXTRA}
    probes = (*state_probes(node.profile, hostvars), *node_probes(node.profile, hostvars, level))
    entry = {
        "evidence": evidence,
        "hostvars": hostvars,
        "meta": node_meta("emu1", hostvars, level, {p.file: p.command for p in probes}, started),
        "profile": node.profile,
    }
    run_pair_probes({"emu1": entry}, lambda _h, _c: ProbeOutput("", "no partner", 255))
    ctx = rules.NodeContext("emu1", node.profile, hostvars, entry["meta"])  # the node fixture
    findings = rules.evaluate(evidence, ctx)
    report = _node_report("emu1", findings).to_dict()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    write_host_bundle(bundle_host_dir(bundle, "emu1"), evidence, entry["meta"])
    write_manifest(bundle, "run-1", {"emu1": rules.verdict(findings)})
    return findings, report, bundle


@pytest.mark.parametrize(
    ("level", "fault"), CASES, ids=[f"{lv}-{f or 'healthy'}" for lv, f in CASES]
)
def test_evaluate_gives_certify_verdict_and_every_rule(tmp_path, level, fault):
    node = full_node(tmp_path)
    findings, report, bundle = _certify_one(node, tmp_path, level, fault)
    (again,) = evaluate_bundle(str(bundle)).to_dict()["nodes"]
    certified = {f.rule: (f.status, f.reason) for f in findings}
    evaluated = {f["rule"]: (f["status"], f["reason"]) for f in again["findings"]}
    assert evaluated == certified, {
        r: (certified[r], evaluated.get(r)) for r in certified if certified[r] != evaluated.get(r)
    }
    assert again["verdict"] == report["verdict"]
    if fault:  # the fault is seen by both (a node that merely ERRORs would prove less)
        assert report["verdict"] in ("FAIL", "WARN"), report["verdict"]
