"""A rail PF's SR-IOV and RDMA state, read from sysfs by gpuboot's collection in one listing:
``ls -ld`` of the PF's ``virtfn<i>`` links and each VF's ``physfn`` link, ``ls -d`` of what
exists (the SR-IOV files, the RDMA devices and netdevs of the PF and its VFs), and ``grep -H .``
of the values (MTUs, ``sriov_totalvfs`` / ``sriov_numvfs``, the GID types).

Every path goes through ``<sysfs>/class/net/<pf>/device``: a VF is ``virtfn<i>`` there
(``-> ../0000:1a:00.2``), its RDMA device ``virtfn<i>/infiniband/<dev>``, its netdev
``virtfn<i>/net/<ifname>``, its PF ``virtfn<i>/physfn`` (``-> ../0000:1a:00.0``). A GID type
(``.../ports/1/gid_attrs/types/<i>``) reads ``RoCE v2`` or ``IB/RoCE v1``; an unused entry
cannot be read (EINVAL) and is not printed. What ``ls`` does not list does not exist (a shell
glob is a directory lookup); a value ``ls`` lists but ``grep`` did not print was not read.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from gpuboot.errors import ParseError
from gpuboot.evidence._common import require_text

TOOL = "sriov sysfs"
ROCE_V2 = "RoCE v2"

_LINK = re.compile(r"^l[-rwxsStT]{9}[.+@]?\s.*?\s(/\S+) -> (\S+?)/?$")
_VALUE = re.compile(r"^(/\S+?/(?:mtu|sriov_totalvfs|sriov_numvfs|gid_attrs/types/\d+)):(.*)$")
_PATH = re.compile(r"^/\S+$")
_VF = re.compile(r"^virtfn(\d+)(?:/(.*))?$")
_GID_TYPE = re.compile(r"^infiniband/([^/]+)/ports/\d+/gid_attrs/types/\d+$")


def sriov_file(pf: str) -> str:
    return f"sysfs_sriov_{pf}.txt"


def sriov_command(pf: str) -> str:
    """The listing of one PF (``{sysfs}`` is the collection's sysfs root)."""
    n = shlex.quote(f"{{sysfs}}/class/net/{pf}")
    d = f"{n}/device"
    vf = f"{d}/virtfn*"
    exists = f"{d}/sriov_totalvfs {d}/sriov_numvfs {d}/infiniband/* {vf}/infiniband/* {vf}/net/*"
    types = "infiniband/*/ports/*/gid_attrs/types/*"
    values = f"{d}/sriov_totalvfs {d}/sriov_numvfs {vf}/net/*/mtu {d}/{types} {vf}/{types}"
    # the PF's own MTU must read (else the probe fails: ERROR); the rest may not exist
    return (
        f"grep -H . {n}/mtu || exit; ls -ld {vf} {vf}/physfn 2>/dev/null; "
        f"ls -d {exists} 2>/dev/null; grep -sH . {values}; true"
    )


@dataclass
class Vf:
    index: int
    address: str | None = None  # its PCI address (the virtfn link's target)
    physfn: str | None = None  # its PF's PCI address (its physfn link's target)
    rdma_devices: list[str] = field(default_factory=list)
    netdevs: dict[str, int | None] = field(default_factory=dict)  # name -> MTU (None: unread)
    gid_types: dict[str, list[str]] = field(default_factory=dict)  # RDMA device -> types read


@dataclass
class PfState:
    pf: str
    mtu: int | None = None
    sriov: bool = False  # sriov_totalvfs exists: the PF has the SR-IOV capability
    total_vfs: int | None = None
    num_vfs: int | None = None
    rdma_devices: list[str] = field(default_factory=list)
    gid_types: dict[str, list[str]] = field(default_factory=dict)
    vfs: dict[int, Vf] = field(default_factory=dict)


def parse_sriov(text: str, pf: str) -> PfState:
    """``pf``'s state from its listing; a line of no known form, or a path outside the PF's
    directories, is unreadable."""
    require_text(TOOL, text)
    state = PfState(pf)
    base = f"/class/net/{pf}/"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if m := _LINK.match(line):
            _link(state, _rel(m.group(1), base, number), m.group(2).rsplit("/", 1)[-1], number)
        elif m := _VALUE.match(line):
            _value(state, _rel(m.group(1), base, number), m.group(2).strip(), number)
        elif _PATH.match(line):
            _exists(state, _rel(line, base, number), number)
        else:
            raise ParseError(TOOL, f"line {number} is no listing line: {line[:80]!r}")
    if state.mtu is None:
        raise ParseError(TOOL, f"no MTU of {pf}: not this PF's listing")
    return state


def _rel(path: str, base: str, number: int) -> str:
    at = path.find(base)
    if at < 0:
        raise ParseError(TOOL, f"line {number}: {path[:80]!r} is not under {base}")
    return path[at + len(base) :]


def _int(value: str, what: str, number: int) -> int:
    if not re.fullmatch(r"\d{1,7}", value):
        raise ParseError(TOOL, f"line {number}: {what} {value[:20]!r} is no number")
    return int(value)


def _vf(state: PfState, rel: str) -> tuple[Vf | None, str]:
    """The VF a path under ``device/`` belongs to (None: the PF's own) and the rest."""
    m = _VF.match(rel.removeprefix("device/"))
    if not m or not rel.startswith("device/"):
        return None, rel.removeprefix("device/")
    index = int(m.group(1))
    return state.vfs.setdefault(index, Vf(index)), m.group(2) or ""


def _link(state: PfState, rel: str, target: str, number: int) -> None:
    vf, rest = _vf(state, rel)
    if vf is None or rest not in ("", "physfn"):
        raise ParseError(TOOL, f"line {number}: unexpected link {rel[:80]!r}")
    if rest:
        vf.physfn = target
    else:
        vf.address = target


def _value(state: PfState, rel: str, value: str, number: int) -> None:
    if rel == "mtu":
        state.mtu = _int(value, "MTU", number)
        return
    vf, rest = _vf(state, rel)
    if m := _GID_TYPE.match(rest):
        owner = vf.gid_types if vf else state.gid_types
        owner.setdefault(m.group(1), []).append(value)
    elif vf is not None and (m := re.fullmatch(r"net/([^/]+)/mtu", rest)):
        vf.netdevs[m.group(1)] = _int(value, "MTU", number)
    elif vf is None and rest in ("sriov_totalvfs", "sriov_numvfs"):
        count = _int(value, rest, number)
        if rest == "sriov_totalvfs":
            state.sriov, state.total_vfs = True, count
        else:
            state.num_vfs = count
    else:
        raise ParseError(TOOL, f"line {number}: unexpected value {rel[:80]!r}")


def _exists(state: PfState, rel: str, number: int) -> None:
    vf, rest = _vf(state, rel)
    kind, _, name = rest.partition("/")
    if vf is None and rest == "sriov_totalvfs":
        state.sriov = True
    elif vf is None and rest == "sriov_numvfs":
        pass
    elif kind == "infiniband" and name and "/" not in name:
        (vf.rdma_devices if vf else state.rdma_devices).append(name)
    elif vf is not None and kind == "net" and name and "/" not in name:
        vf.netdevs.setdefault(name, None)
    else:
        raise ParseError(TOOL, f"line {number}: unexpected path {rel[:80]!r}")
