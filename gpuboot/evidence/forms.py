"""The one registry of evidence forms: which bundle file holds which evidence, in which form,
read by which parser.

A bundle names each file after the command that printed it, spaces as ``_``
(``nvidia-smi_-q_-x.xml``, ``journalctl_-k.txt``, ``dcgmi_diag_-r_3.json``). One kind of
evidence (the kernel log, the GPU's ``-q`` report, NIC port state...) comes in several forms:
the collector writes one (``gpuboot.bundle.names``), a real capture may hold another.
``FORMS`` lists, per kind, the file-name patterns (fnmatch, first match wins), the form's name
and its parser. The rules ask for a kind and read whichever forms the bundle holds
(``gpuboot.checks.base.forms_in``); the fingerprint and ``parser_for`` read the same table.
Name matching only: no I/O.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from gpuboot.bundle.names import LSMOD_FILE, NVIDIA_VERSION_FILE
from gpuboot.evidence.dcgmi import parse_dcgmi_diag_json, parse_dcgmi_diag_text
from gpuboot.evidence.ethtool_stats import parse_ethtool_stats
from gpuboot.evidence.ibstat import parse_ibstat
from gpuboot.evidence.ibstatus import parse_ibstatus
from gpuboot.evidence.ibv_devinfo import parse_ibv_devinfo
from gpuboot.evidence.kernel_log import parse_kernel_log
from gpuboot.evidence.lspci import parse_lspci
from gpuboot.evidence.mig import parse_mig_lci, parse_mig_lgi, parse_mig_lgip
from gpuboot.evidence.mlnx_qos import parse_mlnx_qos
from gpuboot.evidence.modules import parse_lsmod, parse_modinfo, parse_nvidia_version
from gpuboot.evidence.nccl import parse_all_reduce_perf
from gpuboot.evidence.nvbandwidth import parse_nvbandwidth_json, parse_nvbandwidth_text
from gpuboot.evidence.nvidia_smi_csv import parse_query_gpu_csv
from gpuboot.evidence.nvidia_smi_q import parse_nvidia_smi_q, parse_nvidia_smi_q_xml
from gpuboot.evidence.nvidia_smi_table import parse_nvidia_smi_table
from gpuboot.evidence.nvlink import (
    parse_dcgmi_nvlink_errors,
    parse_dcgmi_nvlink_status,
    parse_nvlink_errors,
    parse_nvlink_status,
)
from gpuboot.evidence.packages import (
    UU_BLACKLIST,
    parse_apt_config_list,
    parse_dpkg_query,
    parse_showhold,
)
from gpuboot.evidence.perftest import parse_ib_write_bw
from gpuboot.evidence.rdma_link import parse_rdma_link
from gpuboot.evidence.roce_ecn import parse_ecn_enable
from gpuboot.evidence.show_gids import parse_show_gids
from gpuboot.evidence.topo import parse_topo_matrix

Parser = Callable[[str], Any]

# kind -> ((pattern, form, parser), ...): more specific patterns first. A kind read by a
# plain text scan, not a parser, has None.
FORMS: dict[str, tuple[tuple[str, str, Parser | None], ...]] = {
    # the kernel ring buffer and the logs that copy it (journald, rsyslog's files). Only
    # `journalctl -k` (`--dmesg`) is the kernel log: a unit's journal holds none of it.
    "kernel_log": (
        ("dmesg*", "dmesg", parse_kernel_log),
        ("journalctl_-k*", "journalctl -k", parse_kernel_log),
        ("journalctl_--dmesg*", "journalctl -k", parse_kernel_log),
        ("*var_log_syslog*", "syslog", parse_kernel_log),
        ("syslog*", "syslog", parse_kernel_log),
        ("*var_log_kern.log*", "kern.log", parse_kernel_log),
        ("kern.log*", "kern.log", parse_kernel_log),
        ("*var_log_messages*", "messages", parse_kernel_log),
        ("messages*", "messages", parse_kernel_log),
    ),
    # nvidia-smi -q (text), -q -x (XML), -q -d SECTION (a subset), -a (= -q)
    "smi_q": (
        ("nvidia-smi_-q_-x*", "xml", parse_nvidia_smi_q_xml),
        ("nvidia-smi_-x_-q*", "xml", parse_nvidia_smi_q_xml),
        ("nvidia-smi_-q*.xml", "xml", parse_nvidia_smi_q_xml),
        ("nvidia-smi_-q*", "text", parse_nvidia_smi_q),
        ("nvidia-smi_-a*", "text", parse_nvidia_smi_q),
        ("nvidia-smi_--query.*", "text", parse_nvidia_smi_q),
        ("nvidia-smi_--query_-*", "text", parse_nvidia_smi_q),
    ),
    "query_gpu": (("nvidia-smi_--query-gpu*", "csv", parse_query_gpu_csv),),
    # plain `nvidia-smi` (no arguments): the table, or the tool's answer instead of one
    "smi_table": tuple(
        (name, "table", parse_nvidia_smi_table)
        for name in ("nvidia-smi", "nvidia-smi.txt", "nvidia-smi.log", "nvidia-smi.out")
    ),
    "nvlink_s": (
        ("nvidia-smi_nvlink_-s*", "nvidia-smi", parse_nvlink_status),
        ("nvidia-smi_nvlink_--status*", "nvidia-smi", parse_nvlink_status),
        ("dcgmi_nvlink_-s*", "dcgmi", parse_dcgmi_nvlink_status),
        ("dcgmi_nvlink_--link-status*", "dcgmi", parse_dcgmi_nvlink_status),
    ),
    "nvlink_e": (
        ("nvidia-smi_nvlink_-e*", "nvidia-smi", parse_nvlink_errors),
        ("nvidia-smi_nvlink_--errorcounters*", "nvidia-smi", parse_nvlink_errors),
        ("dcgmi_nvlink_-e*", "dcgmi", parse_dcgmi_nvlink_errors),
        ("dcgmi_nvlink_--errors*", "dcgmi", parse_dcgmi_nvlink_errors),
    ),
    "topo": (("nvidia-smi_topo_-m*", "nvidia-smi", parse_topo_matrix),),
    "mig_lgip": (("nvidia-smi_mig_-lgip*", "nvidia-smi", parse_mig_lgip),),
    "mig_lgi": (("nvidia-smi_mig_-lgi[!p]*", "nvidia-smi", parse_mig_lgi),),  # not -lgip
    "mig_lci": (("nvidia-smi_mig_-lci*", "nvidia-smi", parse_mig_lci),),
    # any nvidia-smi output: a GPU it lost is named the same way in each (a text scan)
    "smi_any": (("nvidia-smi*", "nvidia-smi", None),),
    "nics": (
        ("ibstatus*", "ibstatus", parse_ibstatus),
        ("ibstat*", "ibstat", parse_ibstat),  # after ibstatus: the name starts alike
        ("ibv_devinfo*", "ibv_devinfo", parse_ibv_devinfo),
        ("rdma_link*", "rdma link", parse_rdma_link),  # state only, no rate
    ),
    "mlnx_qos": (("mlnx_qos_-i_*", "mlnx_qos", parse_mlnx_qos),),
    "roce_ecn": (("sys_class_net_*_ecn_enable*", "sysfs", parse_ecn_enable),),
    "gids": (("show_gids*", "show_gids", parse_show_gids),),
    "ethtool_stats": (("ethtool_-S_*", "ethtool -S", parse_ethtool_stats),),
    "nvbandwidth": (
        ("nvbandwidth*.json", "json", parse_nvbandwidth_json),
        ("nvbandwidth*", "text", parse_nvbandwidth_text),
    ),
    "dcgmi_diag": (
        ("dcgmi_diag*.json", "json", parse_dcgmi_diag_json),
        ("dcgmi_diag*", "text", parse_dcgmi_diag_text),
    ),
    "all_reduce": (("all_reduce_perf*", "text", parse_all_reduce_perf),),
    "ib_write_bw": (("ib_write_bw*", "text", parse_ib_write_bw),),
    "lsmod": ((LSMOD_FILE, "lsmod", parse_lsmod),),
    "lspci": (("lspci*", "lspci", parse_lspci),),
    "nvidia_version": ((NVIDIA_VERSION_FILE, "procfs", parse_nvidia_version),),
    "modinfo": (("modinfo_*", "modinfo", parse_modinfo),),
    "dpkg": (("dpkg-query_-W*", "dpkg-query", parse_dpkg_query),),
    "apt_holds": (("apt-mark_showhold*", "apt-mark", parse_showhold),),
    "apt_unattended": (
        (
            "apt-config_dump_Unattended-Upgrade*",
            "apt-config",
            functools.partial(parse_apt_config_list, key=UU_BLACKLIST),
        ),
    ),
}


def form_of(kind: str, name: str) -> str | None:
    """The form of ``kind`` a file name holds, or None."""
    m = _kind_pattern(kind).match(name)
    return FORMS[kind][m.lastindex - 1][1] if m and m.lastindex else None


@functools.cache
def _kind_pattern(kind: str) -> re.Pattern[str]:
    """A kind's patterns as one regex, one group each (fnmatch's translation has none of its
    own): the first alternative that matches is the first pattern that does, as in FORMS."""
    return re.compile("|".join(f"({fnmatch.translate(p)})" for p, _f, _parse in FORMS[kind]))


_PARSER: dict[tuple[str, str], Parser] = {
    (kind, form): parser for kind, forms in FORMS.items() for _p, form, parser in forms if parser
}


def parser_of(kind: str, form: str) -> Parser:
    """The parser of one form of a kind (KeyError for a form read by a text scan)."""
    return _PARSER[(kind, form)]


# Which form a rule reads first where several are held (the fuller one): default, the order
# of FORMS.
PREFER: dict[str, tuple[str, ...]] = {
    "smi_q": ("text", "xml"),
    "nvlink_s": ("nvidia-smi", "dcgmi"),
    "nvlink_e": ("nvidia-smi", "dcgmi"),
    "nics": ("ibstat", "ibstatus", "ibv_devinfo", "rdma link"),
}


def files_of(kind: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """(file, form) for every file of ``kind`` among ``names``, the preferred form first,
    then by name."""
    return list(_files_of(kind, tuple(names)))


# Every rule asks for its kinds on the same node's file names: match them once per node
# (evaluate of a 1,000-node bundle must stay near the time it takes to read it).
@functools.lru_cache(maxsize=64)
def _files_of(kind: str, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    order = PREFER.get(kind) or tuple(dict.fromkeys(f for _p, f, _parse in FORMS[kind]))
    found = [(n, f) for n in names if (f := form_of(kind, n)) is not None]
    return tuple(sorted(found, key=lambda nf: (order.index(nf[1]), nf[0])))


def patterns(*kinds: str) -> tuple[str, ...]:
    """Every file-name pattern of the kinds, for a rule's declared evidence."""
    return tuple(p for kind in kinds for p, _f, _parse in FORMS[kind])


_QUERY_FIELDS = re.compile(r"--query-gpu=(.+?)_--format")


def query_fields(name: str) -> tuple[str, ...] | None:
    """The field list a ``--query-gpu=...`` file name carries (a ``noheader`` table needs it:
    only the command line names its columns), or None."""
    m = _QUERY_FIELDS.search(name)
    return tuple(f.strip() for f in m.group(1).split(",")) if m else None


def parser_for(filename: str) -> Parser | None:
    """Parser for a probe file (its basename is matched), or None if no form has one."""
    name = os.path.basename(filename)
    for kind in FORMS:
        parser = _PARSER.get((kind, form_of(kind, name) or ""))
        if parser is parse_query_gpu_csv and (fields := query_fields(name)):
            return functools.partial(parse_query_gpu_csv, fields=list(fields))
        if parser is not None:
            return parser
    return None
