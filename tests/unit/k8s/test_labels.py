"""gpuboot's names on the Node, and label values the API server accepts whatever a stack
name or rule id holds."""

from __future__ import annotations

import re

import pytest

from gpuboot.k8s import labels as L
from gpuboot.k8s.labels import MAX_VALUE, VALID_VALUE, label_value, rules_value


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("lts-550-cuda12.4", "lts-550-cuda12.4"),
        ("1:550.54.15-0ubuntu1~22.04", "1_550.54.15-0ubuntu1_22.04"),
        ("-.leading and trailing._", "leading_and_trailing"),
        ("stack/with spaces", "stack_with_spaces"),
        ("ünïcode", "n_code"),
        ("", ""),
        ("...", ""),
        ("a" * 70, "a" * MAX_VALUE),
        ("a" * 62 + "-b", "a" * 62),  # the cut leaves a separator at the end: trimmed
    ],
)
def test_label_value(raw: str, want: str):
    assert label_value(raw) == want
    assert VALID_VALUE.match(label_value(raw))


def test_rules_value_cuts_at_a_whole_id():
    ids = [f"NVLINK-{i:03d}" for i in range(10)]
    value = rules_value(ids)
    assert value == "_".join(ids[:5]) and len(value) <= MAX_VALUE
    assert VALID_VALUE.match(value)


def test_rules_value_of_one_overlong_id_is_its_cut_form():
    value = rules_value(["X" * 80])
    assert value == "X" * MAX_VALUE


def test_rules_value_of_nothing_is_empty():
    assert rules_value([]) == ""


KEYS = [
    getattr(L, name)
    for name in dir(L)
    if name.startswith(("LABEL_", "ANNOTATION_")) or name == "TAINT_KEY"
]
# a qualified name: DNS-subdomain prefix, "/", a name of at most 63 characters
QUALIFIED = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


@pytest.mark.parametrize("key", KEYS)
def test_every_key_gpuboot_writes_is_a_qualified_name_under_its_prefix(key: str):
    assert key.startswith(L.PREFIX) and QUALIFIED.match(key)


@pytest.mark.parametrize("value", [*L.STATES, L.QUARANTINE_RMA, L.ACTION_RMA, L.TAINT_VALUE])
def test_every_label_value_gpuboot_writes_is_legal(value: str):
    assert VALID_VALUE.match(value) and value


def test_the_condition_types_are_distinct_camel_case_words():
    kinds = {L.CONDITION_CERTIFIED, L.CONDITION_COMPLIANT}
    assert len(kinds) == 2 and all(re.fullmatch(r"[A-Z][A-Za-z]+", k) for k in kinds)
