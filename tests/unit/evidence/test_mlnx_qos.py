from __future__ import annotations

import pytest

from gpuboot.errors import ParseError
from gpuboot.evidence.mlnx_qos import parse_mlnx_qos

from .conftest import capture_files


@pytest.mark.parametrize("path", capture_files("mlnx_qos"), ids=lambda p: p.name)
def test_every_capture_parses(path):
    assert parse_mlnx_qos(path.read_text()).pfc_enabled


def test_trust_dscp_pfc_prio3(read):
    q = parse_mlnx_qos(read("mlnx_qos/connectx-eth4-trust-dscp-pfc-prio3-os-controlled.txt"))
    assert q.dcbx_mode == "OS controlled" and q.trust_state == "dscp"
    assert q.pfc_priorities == (3,)
    assert q.dscp_to_prio[26] == 3 and q.dscp_to_prio[46] == 5 and len(q.dscp_to_prio) == 64
    assert q.receive_buffer_bytes is None and q.cable_len_m == 7
    assert len(q.traffic_classes) == 8 and {t.tsa for t in q.traffic_classes} == {"vendor"}
    assert q.traffic_classes[0].priorities == (1,) and q.traffic_classes[3].priorities == (3,)


# Newer MOFED adds receive-buffer lines and ETS bandwidth; layout as printed by mlnx_qos,
# values illustrative (no such real capture in the corpus).
_NEWER = """\
DCBX mode: OS controlled
Priority trust state: pcp
default priority:
Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=262016
Cable len: 7
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     0   0   0   1   0   0   0   0
\tbuffer      0   0   0   1   0   0   0   0
tc: 0 ratelimit: unlimited, tsa: ets, bw: 50%
\t priority:  0
tc: 3 ratelimit: unlimited, tsa: ets, bw: 50%
\t priority:  3
"""


def test_receive_buffer_and_ets():
    q = parse_mlnx_qos(_NEWER)
    assert q.trust_state == "pcp" and q.pfc_priorities == (3,)
    assert q.receive_buffer_bytes == (130944, 130944, 0, 0, 0, 0, 0, 0)
    assert q.max_buffer_size_bytes == 262016 and q.pfc_buffer[3] == 1
    assert [(t.tc, t.tsa, t.bw_percent) for t in q.traffic_classes] == [
        (0, "ets", 50),
        (3, "ets", 50),
    ]


@pytest.mark.parametrize("text", ["", "Netlink error: device not found\n", "hello\n"])
def test_garbage_raises(text):
    with pytest.raises(ParseError):
        parse_mlnx_qos(text)
