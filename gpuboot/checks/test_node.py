"""Node certification checks (pytest-testinfra).

One test per rule and host. The rule's finding is attached to the report for
gpuboot's collector; the assertion makes a plain pytest run (molecule's verifier)
fail for the same reason. An exception while reading evidence is a harness ERROR.
"""

from __future__ import annotations

import dataclasses

import pytest

from gpuboot.checks.rules import FAIL, RULES, RULES_BY_ID


@pytest.mark.parametrize("rule_id", [rule.id for rule in RULES])
def test_rule(rule_id: str, node: dict, record_property) -> None:
    rule = RULES_BY_ID[rule_id]
    finding = rule.evaluate(node["evidence"], node["ctx"])
    record_property("finding", dataclasses.asdict(finding))
    assert finding.status != FAIL, f"{rule.id} {rule.title}: {finding.reason}"
