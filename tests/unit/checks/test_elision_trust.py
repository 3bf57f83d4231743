"""A node cannot pass cut output off as a published excerpt: the "[...]" elision line that
excerpt parsers read as "left out, unknown" is honoured only in a bundle marked as an
excerpt (meta.json "excerpt": true, which certify never writes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuboot.bundle.model import ProbeOutput
from gpuboot.checks import rules
from gpuboot.profiles import load_profile

Q = Path(__file__).parents[2] / "fixtures/bundles/real-pcie-ecc/a100-azure-8gpu/nvidia-smi_-q.txt"
Q_RULES = ["GPU-003", "ECC-001", "ECC-002", "THR-001"]


def _one_gpu_then_elision() -> str:
    """The real 8-GPU capture cut after its first GPU, with an author's elision line."""
    text = Q.read_text()
    second = text.index("\nGPU ", text.index("\nGPU ") + 1)
    return text[:second] + "\n[...]\n"


def _statuses(stdout: str, meta: dict) -> dict[str, rules.Finding]:
    ctx = rules.NodeContext(host="n1", profile=load_profile("a100-sxm4-8gpu"), meta=meta)
    evidence = {"nvidia-smi_-q.txt": ProbeOutput(stdout, "", 0)}
    return {f.rule: f for f in rules.evaluate(evidence, ctx, Q_RULES)}


@pytest.mark.parametrize("rule", Q_RULES)
def test_a_node_answer_with_an_elision_line_is_error(rule):
    found = _statuses(_one_gpu_then_elision(), meta={})[rule]
    assert found.status == rules.ERROR, found
    assert "elision" in found.reason


def test_the_whole_capture_is_judged_as_before():
    found = _statuses(Q.read_text(), meta={})
    assert not any(f.status == rules.ERROR for f in found.values()), found


def test_a_marked_excerpt_is_read_as_an_excerpt():
    found = _statuses(_one_gpu_then_elision(), meta={"excerpt": True})
    assert not any("elision" in f.reason for f in found.values()), found
    assert found["GPU-003"].status != rules.ERROR
