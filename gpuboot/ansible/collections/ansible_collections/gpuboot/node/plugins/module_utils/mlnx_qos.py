# The one reading of mlnx_qos's output: the roce_qos module runs it on the node (inside
# AnsiballZ, so stdlib only, and Python 3.9 on EL9: no zip(strict=)) and
# gpuboot.evidence.mlnx_qos on the controller.
"""``mlnx_qos -i <if>`` (MLNX_OFED / DOCA-OFED): trust state, DSCP->priority map, PFC per
priority, optional receive-buffer lines (newer releases) and the tc table (tsa, ETS bw,
priorities per tc).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TRUST_STATES = ("pcp", "dscp")  # what mlnx_qos --trust takes, and so prints
_TC = re.compile(r"^tc:\s*(\d+)\s+ratelimit:\s*([^,]+),\s*tsa:\s*(\w+)(?:,\s*bw:\s*(\d+)%)?", re.I)
_DSCP = re.compile(r"^prio:\s*(\d+)\s+dscp:\s*([\d,\s]*)$")
_ROWS = ("priority", "enabled", "buffer")  # the PFC table's rows: a label, then numbers


class MlnxQosParseError(ValueError):
    """mlnx_qos printed something that is not its QoS listing."""


@dataclass(frozen=True)
class TrafficClass:
    tc: int
    ratelimit: str  # "unlimited" or a rate as printed
    tsa: str  # "vendor", "ets", "strict"
    bw_percent: int | None
    priorities: tuple[int, ...]


@dataclass(frozen=True)
class MlnxQos:
    dcbx_mode: str | None  # "OS controlled" / "firmware controlled"
    trust_state: str | None  # "pcp" or "dscp"
    pfc_enabled: dict[int, bool]  # priority -> PFC on
    pfc_buffer: dict[int, int] = field(default_factory=dict)  # priority -> rx buffer index
    dscp_to_prio: dict[int, int] = field(default_factory=dict)
    receive_buffer_bytes: tuple[int, ...] | None = None
    max_buffer_size_bytes: int | None = None
    cable_len_m: int | None = None
    traffic_classes: tuple[TrafficClass, ...] = ()

    @property
    def pfc_priorities(self) -> tuple[int, ...]:
        return tuple(p for p, on in sorted(self.pfc_enabled.items()) if on)


def _pairs(keys: list[int], values: list[int]) -> list[tuple[int, int]]:
    return [(keys[i], values[i]) for i in range(min(len(keys), len(values)))]


def parse_mlnx_qos(text: str) -> MlnxQos:
    info: dict[str, str] = {}
    prios: list[int] | None = None
    enabled: dict[int, bool] = {}
    buffers: dict[int, int] = {}
    dscp: dict[int, int] = {}
    rx_buf: tuple[int, ...] | None = None
    max_buf = None
    tcs: list[dict] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        # each test below looks at a line only when its first characters can match (eight
        # NICs a node, read on every evaluate)
        if line[:3].lower() == "tc:" and (m := _TC.match(line)):
            tcs.append(
                {
                    "tc": int(m.group(1)),
                    "rate": m.group(2).strip(),
                    "tsa": m.group(3),
                    "bw": int(m.group(4)) if m.group(4) else None,
                    "prios": [],
                }
            )
            continue
        if line.startswith("priority:") and tcs:
            tcs[-1]["prios"] += [int(t) for t in line.split(":", 1)[1].split() if t.isdigit()]
            continue
        toks = line.split()
        label = toks[0] if toks[0] in _ROWS and all(t.isdigit() for t in toks[1:]) else None
        row = [int(t) for t in toks[1:]] if label else []
        if label == "priority":
            prios = row
        elif label == "enabled" and prios is not None:
            enabled = {p: bool(v) for p, v in _pairs(prios, row)}
        elif label == "buffer" and prios is not None:
            buffers = dict(_pairs(prios, row))
        elif line.startswith("prio:") and (m := _DSCP.match(line)):
            for d in (t for t in m.group(2).split(",") if t.strip()):
                dscp[int(d)] = int(m.group(1))
        elif line.lower().startswith("receive buffer size"):
            parts = line.split(":", 1)[1].split(",")
            rx_buf = tuple(int(p) for p in parts if p.strip().isdigit())
            mb = re.search(r"max_buffer_size=(\d+)", line)
            max_buf = int(mb.group(1)) if mb else None
        elif ":" in line:
            k, v = line.split(":", 1)
            info[k.strip().lower()] = v.strip()
    if not enabled and "priority trust state" not in info:
        raise MlnxQosParseError("neither trust state nor PFC table found")
    cable = info.get("cable len")
    return MlnxQos(
        dcbx_mode=info.get("dcbx mode"),
        trust_state=info.get("priority trust state"),
        pfc_enabled=enabled,
        pfc_buffer=buffers,
        dscp_to_prio=dscp,
        receive_buffer_bytes=rx_buf,
        max_buffer_size_bytes=max_buf,
        cable_len_m=int(cable) if cable and cable.isdigit() else None,
        traffic_classes=tuple(
            TrafficClass(t["tc"], t["rate"], t["tsa"], t["bw"], tuple(t["prios"])) for t in tcs
        ),
    )


def unreadable(qos: MlnxQos) -> str:
    """Why this reading cannot be judged ('' when it can). mlnx_qos prints the trust state,
    PFC for all 8 priorities, then the tc table last: output without any of them was cut
    short (or is not mlnx_qos's). The module setting a rail and certify's NIC-002 both ask."""
    if qos.trust_state not in TRUST_STATES:
        return f"trust state {qos.trust_state!r} (want one of {', '.join(TRUST_STATES)})"
    if sorted(qos.pfc_enabled) != list(range(8)):
        return f"PFC row lists {len(qos.pfc_enabled)} of the 8 priorities"
    if not qos.traffic_classes:
        return "no tc table (it prints last)"
    return ""
