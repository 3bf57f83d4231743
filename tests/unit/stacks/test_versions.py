"""Version ordering must agree with dpkg and rpm, or plans say upgrade for a downgrade."""

from __future__ import annotations

import pytest

from gpuboot.stacks.versions import (
    dpkg_compare,
    rpm_compare,
    split_version,
    upstream_of,
    upstream_tuple,
)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("550.54.15-1", "550.54.15-1", 0),
        ("550.54.15-1", "550.127.08-1", -1),  # numeric, not lexical: 54 < 127
        ("570.133.20-1", "550.144.03-1", 1),
        ("1:3.3.9", "3.4.0-1", 1),  # the epoch wins
        ("1:4.2.3-1", "1:3.3.9", 1),
        ("2.9.1-018000", "3.0.0-058000", -1),
        ("1.0~rc1-1", "1.0-1", -1),  # tilde sorts before the release
        ("5.15.0-119.129", "5.15.0-119.130", -1),
        ("12.4.1-1", "12.4.1-0ubuntu1", 1),  # digits beat letters after the common part
        ("1.0", "1.0-0", 0),
        ("6.11.0-29.29~24.04.1", "6.11.0-29.29", -1),
    ],
)
def test_dpkg_order(a: str, b: str, expected: int) -> None:
    assert dpkg_compare(a, b) == expected
    assert dpkg_compare(b, a) == -expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("3:550.54.15-1.el9", "3:550.54.15-1.el9", 0),
        ("3:550.54.15-1.el9", "3:570.133.20-1.el9", -1),
        ("3:550.54.15-1.el9", "570.133.20-1.el9", 1),  # epoch 3 beats no epoch
        ("5.14.0-427.13.1.el9_4", "5.14.0-503.11.1.el9_5", -1),
        ("1.0~rc1-1", "1.0-1", -1),
        ("1.0a-1", "1.0-1", 1),  # more segments is newer
        ("1.10-1", "1.9-1", 1),
        ("1.0-1", "1.0", 0),  # no release on one side: versions decide
    ],
)
def test_rpm_order(a: str, b: str, expected: int) -> None:
    assert rpm_compare(a, b) == expected
    assert rpm_compare(b, a) == -expected


def test_split_and_upstream() -> None:
    assert split_version("3:550.54.15-1.el9") == (3, "550.54.15", "1.el9")
    assert split_version("1:3.3.9") == (1, "3.3.9", "")
    assert split_version("2.9.1-018000") == (0, "2.9.1", "018000")
    assert upstream_of("1:4.2.3-1") == "4.2.3"
    assert upstream_tuple("570.26") == (570, 26)
    assert upstream_tuple("580") < upstream_tuple("580.65.06") < upstream_tuple("580.82.07")
