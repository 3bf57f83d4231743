"""Evidence layer: one pure parser per tool output (text in, typed facts out, no I/O).

Parsers never judge PASS/FAIL; they expose facts (link inactive, remap pending, Xid
category...) for the verdict engine. Output they cannot read raises
``gpuboot.errors.ParseError`` (an ERROR verdict, never a FAIL).

Unit conventions in field names: ``_gbytes_s`` = GB/s (gigabytes per second: NCCL busbw,
NVLink, nvbandwidth), ``_gbits_s`` = Gb/s (gigabits per second: perftest, IB rates, PCIe
notices), ``_mib``, ``_w``, ``_c``, ``_us``. N/A-style values become None.

``PARSERS`` maps an evidence probe-file name pattern (fnmatch, first match wins) to its
parser; ``parser_for(filename)`` picks one for a bundle file.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Callable
from typing import Any

from gpuboot.evidence.dcgmi import parse_dcgmi_diag_json, parse_dcgmi_diag_text
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
from gpuboot.evidence.nvlink import parse_nvlink_errors, parse_nvlink_status
from gpuboot.evidence.packages import (
    UU_BLACKLIST,
    parse_apt_config_list,
    parse_dpkg_query,
    parse_showhold,
)
from gpuboot.evidence.perftest import parse_ib_write_bw
from gpuboot.evidence.roce_ecn import parse_ecn_enable
from gpuboot.evidence.topo import parse_topo_matrix

Parser = Callable[[str], Any]

# Order matters: more specific patterns first (e.g. "-lgip" before "-lgi*", "-q_-x" before "-q").
PARSERS: dict[str, Parser] = {
    "nvidia-smi_-q_-x*.xml": parse_nvidia_smi_q_xml,
    "nvidia-smi_-q*": parse_nvidia_smi_q,
    "nvidia-smi_--query-gpu=*": parse_query_gpu_csv,
    "nvidia-smi_nvlink_-s*": parse_nvlink_status,
    "nvidia-smi_nvlink_--status*": parse_nvlink_status,
    "nvidia-smi_nvlink_-e*": parse_nvlink_errors,
    "nvidia-smi_nvlink_--errorcounters*": parse_nvlink_errors,
    "nvidia-smi_topo_-m*": parse_topo_matrix,
    "nvidia-smi_mig_-lgip*": parse_mig_lgip,
    "nvidia-smi_mig_-lgi*": parse_mig_lgi,
    "nvidia-smi_mig_-lci*": parse_mig_lci,
    "all_reduce_perf*": parse_all_reduce_perf,
    "ib_write_bw_*": parse_ib_write_bw,
    "ibstat.txt": parse_ibstat,
    "ibstatus.txt": parse_ibstatus,
    "ibv_devinfo*": parse_ibv_devinfo,
    "mlnx_qos_-i_*": parse_mlnx_qos,
    "nvbandwidth*.json": parse_nvbandwidth_json,
    "nvbandwidth*": parse_nvbandwidth_text,
    "dcgmi_diag*.json": parse_dcgmi_diag_json,
    "dcgmi_diag*": parse_dcgmi_diag_text,
    "dmesg*": parse_kernel_log,
    "journalctl_-k*": parse_kernel_log,
    "lsmod.txt": parse_lsmod,
    "lspci*": parse_lspci,
    "proc_driver_nvidia_version.txt": parse_nvidia_version,
    "modinfo_*": parse_modinfo,
    "sys_class_net_*_ecn_enable*": parse_ecn_enable,
    "dpkg-query_-W*": parse_dpkg_query,
    "apt-mark_showhold*": parse_showhold,
    "apt-config_dump_Unattended-Upgrade*": functools.partial(
        parse_apt_config_list, key=UU_BLACKLIST
    ),
}

_QUERY = re.compile(r"--query-gpu=([^_]+)")


def parser_for(filename: str) -> Parser | None:
    """Parser for a probe file (basename is matched), or None if no parser applies."""
    name = os.path.basename(filename)
    for pattern, parser in PARSERS.items():
        if fnmatch.fnmatchcase(name, pattern):
            if parser is parse_query_gpu_csv and (m := _QUERY.search(name)):
                # noheader csv needs the field list, which only the command line carries
                return functools.partial(parse_query_gpu_csv, fields=m.group(1).split(","))
            return parser
    return None


__all__ = ["PARSERS", "Parser", "parser_for"]
