"""Package version arithmetic: Debian (dpkg) and RPM ordering, upstream parts.

Pure functions. The orderings follow dpkg's ``verrevcmp`` and rpm's ``rpmvercmp``
(re-implemented here from their documented behaviour) so that a plan computed on the
controller agrees with what apt or dnf would do on the node.
"""

from __future__ import annotations

import re

DIGITS = "0123456789"

# Upstream versions a stack names (driver 550.54.15, CUDA 12.4.1, DOCA 2.9.1...).
UPSTREAM_RE = re.compile(r"^\d+(\.\d+)+$")
# Full package versions as apt and dnf take them: [epoch:]upstream[-revision].
DEBIAN_VERSION_RE = re.compile(r"^(\d+:)?\d[A-Za-z0-9.+~]*(-[A-Za-z0-9.+~]+)?$")
RPM_VERSION_RE = re.compile(r"^(\d+:)?\d[A-Za-z0-9._+~^]*(-[A-Za-z0-9._+~^]+)?$")
PACKAGE_VERSION_RE = {"debian": DEBIAN_VERSION_RE, "redhat": RPM_VERSION_RE}


def split_version(version: str) -> tuple[int, str, str]:
    """``3:550.54.15-1.el9`` -> ``(3, "550.54.15", "1.el9")``; no revision -> ``""``."""
    epoch = 0
    if ":" in version:
        head, version = version.split(":", 1)
        epoch = int(head)
    upstream, _, revision = version.rpartition("-")
    if not upstream:  # no "-": the whole string is the upstream version
        upstream, revision = revision, ""
    return epoch, upstream, revision


def upstream_of(version: str) -> str:
    """The upstream part of a package version (no epoch, no revision)."""
    return split_version(version)[1]


def upstream_tuple(version: str) -> tuple[int, ...]:
    """``550.54.15`` -> ``(550, 54, 15)``: numeric comparison of upstream versions."""
    return tuple(int(part) for part in re.findall(r"\d+", upstream_of(version)))


# ------------------------------------------------------------------ dpkg ordering
def _dpkg_order(char: str) -> int:
    # dpkg: '~' sorts before everything, even the end of the string; letters before
    # other characters.
    if char == "~":
        return -1
    if not char or char in DIGITS:
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        while (i < len(a) and a[i] not in DIGITS) or (j < len(b) and b[j] not in DIGITS):
            ac = _dpkg_order(a[i]) if i < len(a) else 0
            bc = _dpkg_order(b[j]) if j < len(b) else 0
            if ac != bc:
                return -1 if ac < bc else 1
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        first_diff = 0
        while i < len(a) and a[i] in DIGITS and j < len(b) and b[j] in DIGITS:
            if not first_diff and a[i] != b[j]:
                first_diff = -1 if a[i] < b[j] else 1
            i += 1
            j += 1
        if i < len(a) and a[i] in DIGITS:
            return 1
        if j < len(b) and b[j] in DIGITS:
            return -1
        if first_diff:
            return first_diff
    return 0


def dpkg_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as ``dpkg --compare-versions a lt|eq|gt b`` would answer."""
    ea, ua, ra = split_version(a)
    eb, ub, rb = split_version(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


# ------------------------------------------------------------------ rpm ordering
def _rpmvercmp(a: str, b: str) -> int:
    if a == b:
        return 0
    i = j = 0
    while i < len(a) or j < len(b):
        while i < len(a) and not a[i].isalnum() and a[i] not in "~^":
            i += 1
        while j < len(b) and not b[j].isalnum() and b[j] not in "~^":
            j += 1
        # '~' sorts before anything (pre-releases); '^' after the end but before more.
        for mark in "~^":
            a_mark = i < len(a) and a[i] == mark
            b_mark = j < len(b) and b[j] == mark
            if a_mark or b_mark:
                break
        else:
            mark = ""
        if mark == "~":
            if not (i < len(a) and a[i] == "~"):
                return 1
            if not (j < len(b) and b[j] == "~"):
                return -1
            i += 1
            j += 1
            continue
        if mark == "^":
            if i >= len(a):
                return -1
            if j >= len(b):
                return 1
            if a[i] != "^":
                return 1
            if b[j] != "^":
                return -1
            i += 1
            j += 1
            continue
        if i >= len(a) or j >= len(b):
            break
        numeric = a[i] in DIGITS
        take = (lambda c: c in DIGITS) if numeric else (lambda c: c.isalpha())
        si, sj = i, j
        while i < len(a) and take(a[i]):
            i += 1
        while j < len(b) and take(b[j]):
            j += 1
        seg_a, seg_b = a[si:i], b[sj:j]
        if not seg_b:  # numeric segments are newer than alphabetic ones
            return 1 if numeric else -1
        if numeric:
            seg_a, seg_b = seg_a.lstrip("0"), seg_b.lstrip("0")
            if len(seg_a) != len(seg_b):
                return -1 if len(seg_a) < len(seg_b) else 1
        if seg_a != seg_b:
            return -1 if seg_a < seg_b else 1
    rest_a, rest_b = i < len(a), j < len(b)
    if rest_a == rest_b:
        return 0
    return 1 if rest_a else -1


def rpm_compare(a: str, b: str) -> int:
    """-1, 0 or 1 comparing two ``[epoch:]version[-release]`` strings as rpm does."""
    ea, ua, ra = split_version(a)
    eb, ub, rb = split_version(b)
    if ea != eb:
        return -1 if ea < eb else 1
    result = _rpmvercmp(ua, ub)
    if result or not (ra and rb):  # a missing release matches any release
        return result
    return _rpmvercmp(ra, rb)


def compare_versions(a: str, b: str, os_family: str) -> int:
    """Order two package versions the way the OS family's package manager does."""
    return rpm_compare(a, b) if os_family == "redhat" else dpkg_compare(a, b)
