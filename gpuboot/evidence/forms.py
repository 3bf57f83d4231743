"""Which bundle files hold which evidence, in every form its tool prints.

A bundle names each file after the command that printed it, spaces as ``_``
(``nvidia-smi_-q_-x.xml``, ``journalctl_-k.txt``, ``dcgmi_diag_-r_3.json``). One kind of
evidence (the kernel log, the GPU's ``-q`` report, NIC port state...) comes in several forms:
the collector writes one, a real capture may hold another. ``FORMS`` lists, per kind, the
file-name patterns (fnmatch, first match wins) and the form's name; a rule asks for a kind
and reads whichever forms the bundle holds (``gpuboot.checks.base.forms_in``), with one parser per
form. Pure data and name matching: no I/O.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Iterable

# kind -> ((pattern, form), ...): more specific patterns first.
FORMS: dict[str, tuple[tuple[str, str], ...]] = {
    # the kernel ring buffer and the logs that copy it (journald, rsyslog's files)
    "kernel_log": (
        ("dmesg*", "dmesg"),
        ("journalctl*", "journalctl -k"),
        ("*var_log_syslog*", "syslog"),
        ("syslog*", "syslog"),
        ("*var_log_kern.log*", "kern.log"),
        ("kern.log*", "kern.log"),
        ("*var_log_messages*", "messages"),
        ("messages*", "messages"),
    ),
    # nvidia-smi -q (text), -q -x (XML), -q -d SECTION (a subset), -a (= -q)
    "smi_q": (
        ("nvidia-smi_-q_-x*", "xml"),
        ("nvidia-smi_-x_-q*", "xml"),
        ("nvidia-smi_-q*.xml", "xml"),
        ("nvidia-smi_-q*", "text"),
        ("nvidia-smi_-a*", "text"),
        ("nvidia-smi_--query.*", "text"),
        ("nvidia-smi_--query_-*", "text"),
    ),
    "query_gpu": (("nvidia-smi_--query-gpu*", "csv"),),
    # any nvidia-smi output: a GPU it lost is named the same way in each
    "smi_any": (("nvidia-smi*", "nvidia-smi"),),
    "nvlink_s": (
        ("nvidia-smi_nvlink_-s*", "nvidia-smi"),
        ("nvidia-smi_nvlink_--status*", "nvidia-smi"),
        ("dcgmi_nvlink_-s*", "dcgmi"),
        ("dcgmi_nvlink_--link-status*", "dcgmi"),
    ),
    "nvlink_e": (
        ("nvidia-smi_nvlink_-e*", "nvidia-smi"),
        ("nvidia-smi_nvlink_--errorcounters*", "nvidia-smi"),
        ("dcgmi_nvlink_-e*", "dcgmi"),
        ("dcgmi_nvlink_--errors*", "dcgmi"),
    ),
    "nics": (
        ("ibstatus*", "ibstatus"),
        ("ibstat*", "ibstat"),  # after ibstatus: the name starts alike
        ("ibv_devinfo*", "ibv_devinfo"),
    ),
    "nvbandwidth": (("nvbandwidth*.json", "json"), ("nvbandwidth*", "text")),
    "dcgmi_diag": (("dcgmi_diag*.json", "json"), ("dcgmi_diag*", "text")),
    "all_reduce": (("all_reduce_perf*", "text"),),
    "ib_write_bw": (("ib_write_bw*", "text"),),
}


def form_of(kind: str, name: str) -> str | None:
    """The form of ``kind`` a file name holds, or None."""
    m = _kind_pattern(kind).match(name)
    return FORMS[kind][m.lastindex - 1][1] if m and m.lastindex else None


@functools.cache
def _kind_pattern(kind: str) -> re.Pattern[str]:
    """A kind's patterns as one regex, one group each (fnmatch's translation has none of its
    own): the first alternative that matches is the first pattern that does, as in FORMS."""
    return re.compile("|".join(f"({fnmatch.translate(p)})" for p, _f in FORMS[kind]))


# Which form a rule reads first where several are held (the fuller one): default, the order
# of FORMS.
PREFER: dict[str, tuple[str, ...]] = {
    "smi_q": ("text", "xml"),
    "nvlink_s": ("nvidia-smi", "dcgmi"),
    "nvlink_e": ("nvidia-smi", "dcgmi"),
    "nics": ("ibstat", "ibstatus", "ibv_devinfo"),
}


def files_of(kind: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """(file, form) for every file of ``kind`` among ``names``, the preferred form first,
    then by name."""
    return list(_files_of(kind, tuple(names)))


# Every rule asks for its kinds on the same node's file names: match them once per node
# (evaluate of a 1,000-node bundle must stay near the time it takes to read it).
@functools.lru_cache(maxsize=64)
def _files_of(kind: str, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    order = PREFER.get(kind) or tuple(dict.fromkeys(f for _p, f in FORMS[kind]))
    found = [(n, f) for n in names if (f := form_of(kind, n)) is not None]
    return tuple(sorted(found, key=lambda nf: (order.index(nf[1]), nf[0])))


def patterns(*kinds: str) -> tuple[str, ...]:
    """Every file-name pattern of the kinds, for a rule's declared evidence."""
    return tuple(p for kind in kinds for p, _ in FORMS[kind])
