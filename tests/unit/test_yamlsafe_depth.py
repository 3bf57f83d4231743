"""loads_json_bounded: a JSON document nested past the bound is refused (ValueError), at
any depth without a RecursionError; within it, the document is returned as json.loads
reads it. nesting_depth counts what json.loads builds, level by level."""

from __future__ import annotations

import json

import pytest

from gpuboot.yamlsafe import loads_json_bounded, nesting_depth


def _nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value, "s": "x"}
    return value


def _reference(value: object) -> int:
    """The depth by recursion: what the level-by-level walk must agree with."""
    if isinstance(value, dict):
        return 1 + max(map(_reference, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_reference, value), default=0)
    return 0


@pytest.mark.parametrize(
    "value",
    [
        1,
        "text",
        None,
        [],
        {},
        [[], {}],
        {"a": [1, {"b": []}], "c": "d"},
        [1, [2, [3, [4, {"e": [5]}]]], 6],
        _nested(10),
        _nested(5, []),
    ],
)
def test_nesting_depth_agrees_with_a_recursive_count(value):
    assert nesting_depth(value, 64) == _reference(value)


def test_nesting_depth_stops_one_past_the_bound():
    assert nesting_depth(_nested(500), 64) == 65


@pytest.mark.parametrize("depth", [64, 65, 900])
def test_a_document_is_refused_only_past_the_bound(depth):
    text = json.dumps(_nested(depth))
    if depth <= 64:
        assert loads_json_bounded(text) == json.loads(text)
        assert loads_json_bounded(text.encode()) == json.loads(text)
    else:
        with pytest.raises(ValueError, match="nests deeper than 64 levels"):
            loads_json_bounded(text)
        with pytest.raises(ValueError, match="nests deeper than 64 levels"):
            loads_json_bounded(text.encode("utf-16"))


def test_a_very_deep_document_is_a_value_error_not_a_recursion_error():
    with pytest.raises(ValueError, match="nests deeper"):
        loads_json_bounded("[" * 100_000 + "]" * 100_000)


def test_brackets_inside_strings_are_not_nesting():
    doc = {"reason": "[" * 200 + "{" * 200, "nodes": [{"host": "n1", "findings": []}]}
    assert loads_json_bounded(json.dumps(doc)) == doc
    wide = [[{"a": [i]}] for i in range(100)]  # many containers, shallow: walked, passed
    assert loads_json_bounded(json.dumps(wide)) == wide


def test_a_large_document_is_walked_for_its_depth():
    padding = "x" * 200_000  # past the size below which brackets are counted first
    with pytest.raises(ValueError, match="nests deeper than 64 levels"):
        loads_json_bounded(json.dumps([padding, _nested(65)]))
    assert loads_json_bounded(json.dumps([padding, _nested(63)]))[0] == padding
