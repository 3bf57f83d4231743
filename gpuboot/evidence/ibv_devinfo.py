"""``ibv_devinfo`` (rdma-core): per-HCA attributes and per-port state.

Default output has no rate (``-v`` adds active_width/active_speed, parsed when present).
Port state text is "PORT_ACTIVE (4)"; MTUs are "4096 (5)" -> bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text, to_int

TOOL = "ibv_devinfo"

_HCA = re.compile(r"^hca_id:\s*(\S+)\s*$")
_PORT = re.compile(r"^port:\s*(\d+)\s*$")
# the value is stripped, not matched as "(.*?)\s*$": that lazy group retries the trailing
# "\s*$" at every character, quadratic time on a long run of spaces
_KV = re.compile(r"^([A-Za-z_][\w ]*?):(.*)$")


@dataclass(frozen=True)
class IbvPort:
    port: int
    state: str | None  # "PORT_ACTIVE", "PORT_DOWN", ...
    active_mtu_bytes: int | None
    max_mtu_bytes: int | None
    link_layer: str | None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.state == "PORT_ACTIVE"


@dataclass(frozen=True)
class IbvDevice:
    hca_id: str
    fw_ver: str | None
    vendor_part_id: int | None  # 4129 = ConnectX-7, 4125 = ConnectX-6 Dx, ...
    board_id: str | None
    ports: tuple[IbvPort, ...]
    fields: dict[str, str] = field(default_factory=dict)


def _state(value: str | None) -> str | None:
    return value.split()[0] if value else None


def parse_ibv_devinfo(text: str) -> tuple[IbvDevice, ...]:
    require_text(TOOL, text)
    if "no ib devices found" in text.lower():
        return ()
    devs: list[tuple[str, dict[str, str], list[tuple[int, dict[str, str]]]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _HCA.match(line):
            devs.append((m.group(1), {}, []))
        elif (m := _PORT.match(line)) and devs:
            devs[-1][2].append((int(m.group(1)), {}))
        elif (m := _KV.match(line)) and devs:
            target = devs[-1][2][-1][1] if devs[-1][2] else devs[-1][1]
            target.setdefault(m.group(1).strip(), m.group(2).strip())
        elif devs and devs[-1][2]:
            continue  # -v continuation lines (GID tables etc.)
        else:
            raise ParseError(TOOL, f"unexpected line: {line[:80]!r}")
    if not devs:
        raise ParseError(TOOL, "no hca_id block found", hint="is this ibv_devinfo output?")
    return tuple(
        IbvDevice(
            hca_id=hca,
            fw_ver=info.get("fw_ver"),
            vendor_part_id=to_int(info.get("vendor_part_id")),
            board_id=info.get("board_id"),
            ports=tuple(
                IbvPort(
                    num,
                    _state(p.get("state")),
                    to_int(p.get("active_mtu")),
                    to_int(p.get("max_mtu")),
                    p.get("link_layer"),
                    p,
                )
                for num, p in ports
            ),
            fields=info,
        )
        for hca, info, ports in devs
    )
