"""The mlx5 ECN switches as `grep -H . .../ecn/roce_{np,rp}/enable/*` prints them.

No real capture is in the corpus: the sample below is a layout example built from
NVIDIA's ECN documentation (/sys/class/net/<interface>/ecn/<protocol>/enable/<X>, one
file per protocol roce_np/roce_rp and priority 0..7 holding 1 or 0) and grep's
``-H`` output (``<file>:<line>``)."""

from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence import parser_for
from gpuboot.evidence.roce_ecn import parse_ecn_enable

SAMPLE = "".join(
    f"/sys/class/net/enp26s0np0/ecn/{proto}/enable/{prio}:{1 if prio == 3 else 0}\n"
    for proto in ("roce_np", "roce_rp")
    for prio in range(8)
)


def test_reads_every_switch():
    switches = parse_ecn_enable(SAMPLE)
    assert len(switches) == 16
    assert switches[("roce_np", 3)] and switches[("roce_rp", 3)]
    assert not switches[("roce_np", 0)] and not switches[("roce_rp", 7)]


def test_registered_for_its_probe_file():
    assert parser_for("sys_class_net_enp26s0np0_ecn_enable.txt") is parse_ecn_enable


@pytest.mark.parametrize(
    "text",
    ["", "/sys/class/net/enp26s0np0/ecn/roce_np/enable/3\n", "grep: /sys/x: No such file\n"],
)
def test_nothing_readable_is_a_parse_error(text):
    with pytest.raises(ParseError, match="ecn"):
        parse_ecn_enable(text)
