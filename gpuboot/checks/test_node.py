"""Node certification checks (pytest-testinfra), for molecule's verifier and an
operator's own `pytest --ansible-inventory INV [--hosts PATTERN]` run (hosts, variables
and connections from gpuboot's checked inventory: conftest.py).

One test per rule and host, over the rules `gpuboot certify` judges with: a FAIL fails
the test with the rule's reason; evidence that could not be had is a test ERROR.
"""

from __future__ import annotations

import pytest

from gpuboot.checks.rules import FAIL, RULES, RULES_BY_ID


@pytest.mark.parametrize("rule_id", [rule.id for rule in RULES])
def test_rule(rule_id: str, node: dict) -> None:
    rule = RULES_BY_ID[rule_id]
    finding = rule.evaluate(node["evidence"], node["ctx"])
    assert finding.status != FAIL, f"{rule.id} {rule.title}: {finding.reason}"
