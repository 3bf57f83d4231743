"""host_ranges folds zero-padded host names (gpu01..gpu03 -> gpu[01-03]) keeping their
width, never mixes widths in one range, and folds unpadded names as before."""

from __future__ import annotations

import re

import pytest

from gpuboot.ui import host_ranges


def _expand(text: str) -> list[str]:
    """The hostlist notation back to names (each bound keeps its digits' width)."""
    names = []
    for part in re.split(r", (?![^\[]*\])", text):
        found = re.fullmatch(r"(.*?)\[(.*)\]", part)
        if not found:
            names.append(part)
            continue
        for item in found[2].split(","):
            lo, _, hi = item.partition("-")
            width = len(lo) if lo.startswith("0") else 0
            names += [f"{found[1]}{n:0{width}d}" for n in range(int(lo), int(hi or lo) + 1)]
    return names


@pytest.mark.parametrize(
    ("hosts", "folded"),
    [
        (["gpu01", "gpu02", "gpu03"], "gpu[01-03]"),
        (["gpu03", "gpu01", "gpu02", "gpu05"], "gpu[01-03,05]"),
        (["gpu001", "gpu002", "gpu010"], "gpu[001-002,010]"),
        # a name of the padded width without a leading zero belongs to that range
        ([f"gpu{n:02d}" for n in range(1, 13)], "gpu[01-12]"),
        # padded and unpadded numbers never share a range: gpu1 and gpu01 are two hosts
        (["gpu1", "gpu2", "gpu01", "gpu02"], "gpu[01-02], gpu[1-2]"),
        (["gpu002", "gpu01"], "gpu01, gpu002"),
        (["node", "node1"], "node, node1"),
        (["gpu07"], "gpu07"),
    ],
)
def test_padded_names_fold_keeping_their_width(hosts, folded):
    assert host_ranges(hosts) == folded
    assert sorted(_expand(folded)) == sorted(set(hosts))


@pytest.mark.parametrize(
    ("hosts", "folded"),
    [
        (["node1", "node2", "node3", "node4", "node7", "gpu-a3"], "gpu-a3, node[1-4,7]"),
        (["node9", "node10"], "node[9-10]"),
        (["node10", "node2"], "node[2,10]"),
        (["login"], "login"),
    ],
)
def test_unpadded_names_fold_as_before(hosts, folded):
    assert host_ranges(hosts) == folded
    assert sorted(_expand(folded)) == sorted(hosts)
