"""Evidence layer: one pure parser per tool output (text in, typed facts out, no I/O).

Parsers never judge PASS/FAIL; they expose facts (link inactive, remap pending, Xid
category...) for the verdict engine. Output they cannot read raises
``gpuboot.errors.ParseError`` (an ERROR verdict, never a FAIL).

Unit conventions in field names: ``_gbytes_s`` = GB/s (gigabytes per second: NCCL busbw,
NVLink, nvbandwidth), ``_gbits_s`` = Gb/s (gigabits per second: perftest, IB rates, PCIe
notices), ``_mib``, ``_w``, ``_c``, ``_us``. N/A-style values become None.

Which bundle file holds which evidence, in which form, read by which parser, is one table:
``gpuboot.evidence.forms.FORMS``; ``parser_for(filename)`` picks a bundle file's parser from it.
The parsers are named here too, as the package's public face.
"""

from __future__ import annotations

from gpuboot.evidence.dcgmi import parse_dcgmi_diag_json, parse_dcgmi_diag_text
from gpuboot.evidence.forms import Parser, parser_for
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

__all__ = [
    "UU_BLACKLIST",
    "Parser",
    "parse_all_reduce_perf",
    "parse_apt_config_list",
    "parse_dcgmi_diag_json",
    "parse_dcgmi_diag_text",
    "parse_dpkg_query",
    "parse_ecn_enable",
    "parse_ib_write_bw",
    "parse_ibstat",
    "parse_ibstatus",
    "parse_ibv_devinfo",
    "parse_kernel_log",
    "parse_lsmod",
    "parse_lspci",
    "parse_mig_lci",
    "parse_mig_lgi",
    "parse_mig_lgip",
    "parse_mlnx_qos",
    "parse_modinfo",
    "parse_nvbandwidth_json",
    "parse_nvbandwidth_text",
    "parse_nvidia_smi_q",
    "parse_nvidia_smi_q_xml",
    "parse_nvidia_version",
    "parse_nvlink_errors",
    "parse_nvlink_status",
    "parse_query_gpu_csv",
    "parse_showhold",
    "parse_topo_matrix",
    "parser_for",
]
