"""A failed rule's action is what an operator types next: every `gpuboot install --tags X` it
names must select tasks (a tag no task carries is refused by install, or would run nothing),
and a rule that a role makes true names its own id, the remediation --tags <RULE> runs."""

from __future__ import annotations

import re

import pytest

from gpuboot import ids
from gpuboot.checks.rules import RULES
from gpuboot.install import known_tags

TAGS = re.compile(r"gpuboot install --tags ([^`;\s)]+)")


def _named(action: str) -> list[str]:
    return [tag for m in TAGS.finditer(action) for tag in m[1].split(",")]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_every_tag_an_action_names_exists(rule):
    unknown = [t for t in _named(rule.action) if t not in known_tags()]
    assert not unknown, f"{rule.id}: `{rule.action}` names tags no task carries: {unknown}"
    # a rule id as a tag selects its fixing tasks only if some PATCH task is tagged with it
    empty = [t for t in _named(rule.action) if ids.ID_RE.fullmatch(t) and t not in ids.fixes()]
    assert not empty, f"{rule.id}: --tags {empty} selects no PATCH task"


def test_judged_only_rules_send_nobody_to_install_tags():
    sent = [r.id for r in RULES if r.id in ids.JUDGED_ONLY and _named(r.action)]
    assert not sent, sent


@pytest.mark.parametrize("rule", ["STK-002", "STK-003", "GPU-002", "NIC-003"])
def test_a_remediable_rule_names_its_own_tag(rule):
    action = next(r.action for r in RULES if r.id == rule)
    assert _named(action) == [rule], action
