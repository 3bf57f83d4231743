"""``ibstatus`` (the shell wrapper over sysfs): one block per device port with state codes
("4: ACTIVE"), and rate text "200 Gb/sec (4X HDR)". Ethernet ports report a nominal rate
("40 Gb/sec (4X QDR)") that says nothing about the real link speed: ``link_layer`` tells.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "ibstatus"

_HDR = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")
_KV = re.compile(r"^([a-z_ ]+):\s*(.*?)\s*$")
_STATE = re.compile(r"^(\d+):\s*(\S+)$")
_RATE = re.compile(r"^([\d.]+)\s*Gb/sec(?:\s*\(([^)]*)\))?$")


@dataclass(frozen=True)
class IbStatusPort:
    device: str
    port: int
    state: str | None  # "ACTIVE", "DOWN", "INIT", ...
    state_code: int | None
    phys_state: str | None  # "LinkUp", "Disabled", "Polling", ...
    phys_state_code: int | None
    rate_gbits_s: float | None
    rate_detail: str | None  # "4X HDR"
    link_layer: str | None
    base_lid: str | None
    sm_lid: str | None
    default_gid: str | None

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


def _code(value: str | None) -> tuple[int | None, str | None]:
    m = _STATE.match(value or "")
    return (int(m.group(1)), m.group(2)) if m else (None, value)


def parse_ibstatus(text: str) -> tuple[IbStatusPort, ...]:
    require_text(TOOL, text)
    blocks: list[tuple[str, int, dict[str, str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _HDR.match(line):
            blocks.append((m.group(1), int(m.group(2)), {}))
        elif (m := _KV.match(line)) and blocks:
            blocks[-1][2][m.group(1).strip()] = m.group(2)
        else:
            raise ParseError(TOOL, f"unexpected line: {line[:80]!r}")
    if not blocks:
        raise ParseError(
            TOOL, "no 'Infiniband device ... status:' block", hint="is this ibstatus output?"
        )
    ports = []
    for dev, port, kv in blocks:
        state_code, state = _code(kv.get("state"))
        phys_code, phys = _code(kv.get("phys state"))
        rm = _RATE.match(kv.get("rate", ""))
        ports.append(
            IbStatusPort(
                device=dev,
                port=port,
                state=state,
                state_code=state_code,
                phys_state=phys,
                phys_state_code=phys_code,
                rate_gbits_s=float(rm.group(1)) if rm else None,
                rate_detail=rm.group(2) if rm else None,
                link_layer=kv.get("link_layer"),
                base_lid=kv.get("base lid"),
                sm_lid=kv.get("sm lid"),
                default_gid=kv.get("default gid"),
            )
        )
    return tuple(ports)
