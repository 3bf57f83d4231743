"""``ibstat`` (infiniband-diags): one block per CA, one sub-block per port.

ibstat can die part-way ("ibpanic: ... stat of IB device 'mlx5_8' failed", exit 255): the
ports read so far are returned together with ``errors``, so a check can see both the
partial inventory and that the listing is incomplete. ``Rate`` is Gb/s as printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text, to_int

TOOL = "ibstat"

_CA = re.compile(r"^CA\s+'([^']+)'\s*$")
_PORT = re.compile(r"^Port\s+(\d+):\s*$")


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: int
    state: str | None  # "Active", "Down", "Initializing", ...
    physical_state: str | None  # "LinkUp", "Disabled", "Polling", ...
    rate_gbits_s: int | None
    link_layer: str | None  # "InfiniBand" or "Ethernet"
    base_lid: int | None
    sm_lid: int | None
    port_guid: str | None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return (self.state or "").lower() == "active" and (self.physical_state or "") == "LinkUp"


@dataclass(frozen=True)
class IbCa:
    name: str
    ca_type: str | None  # "MT4129" (ConnectX-7), ...
    firmware: str | None
    node_guid: str | None
    ports: tuple[IbPort, ...]


@dataclass(frozen=True)
class Ibstat:
    cas: tuple[IbCa, ...]
    errors: tuple[str, ...] = ()

    @property
    def ports(self) -> tuple[IbPort, ...]:
        return tuple(p for ca in self.cas for p in ca.ports)

    @property
    def complete(self) -> bool:
        return not self.errors

    def port(self, ca: str, port: int = 1) -> IbPort:
        return next(p for p in self.ports if p.ca == ca and p.port == port)


def _complete(name: str, info: dict[str, str], ports: list[tuple[int, dict[str, str]]]) -> None:
    """A CA block lists as many ports as its "Number of ports" says, each ending with its
    "Link layer" line: a block short of either was cut off (a timeout, a size cap)."""
    declared = to_int(info.get("Number of ports"))
    if declared is None or len(ports) < declared:
        raise ParseError(TOOL, f"CA {name!r} lists {len(ports)} of {declared} port(s): cut short")
    for num, port in ports:
        if port.get("Link layer") not in ("InfiniBand", "Ethernet"):
            raise ParseError(TOOL, f"CA {name!r} port {num} ends before its Link layer: cut short")


def _key_value(line: str) -> tuple[str, str] | None:
    """ "Key: value" split at the first colon, both stripped; None without a key. String
    methods, not a regex: a lazy group before a trailing ``\\s*$`` retried at every
    character of a long run of spaces (minutes for a 1 MiB line)."""
    key, colon, value = line.partition(":")
    return (key.strip(), value.strip()) if colon and key else None


def parse_ibstat(text: str) -> Ibstat:
    require_text(TOOL, text)
    cas: list[tuple[str, dict[str, str], list[tuple[int, dict[str, str]]]]] = []
    errors: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _CA.match(line):
            cas.append((m.group(1), {}, []))
        elif (m := _PORT.match(line)) and cas:
            cas[-1][2].append((int(m.group(1)), {}))
        elif line.startswith("ibpanic") or line.lower().startswith(("ibwarn", "error")):
            errors.append(line)
        elif cas and (kv := _key_value(line)):
            target = cas[-1][2][-1][1] if cas[-1][2] else cas[-1][1]
            target[kv[0]] = kv[1]
        else:
            raise ParseError(TOOL, f"unexpected line: {line[:80]!r}")
    if not cas and not errors:
        raise ParseError(TOOL, "no CA block found", hint="is this ibstat output?")
    for name, info, ports in cas:
        _complete(name, info, ports)
    out = []
    for name, info, ports in cas:
        out.append(
            IbCa(
                name=name,
                ca_type=info.get("CA type"),
                firmware=info.get("Firmware version"),
                node_guid=info.get("Node GUID"),
                ports=tuple(
                    IbPort(
                        ca=name,
                        port=num,
                        state=p.get("State"),
                        physical_state=p.get("Physical state"),
                        rate_gbits_s=to_int(p.get("Rate")),
                        link_layer=p.get("Link layer"),
                        base_lid=to_int(p.get("Base lid")),
                        sm_lid=to_int(p.get("SM lid")),
                        port_guid=p.get("Port GUID"),
                        fields=p,
                    )
                    for num, p in ports
                ),
            )
        )
    return Ibstat(cas=tuple(out), errors=tuple(errors))
